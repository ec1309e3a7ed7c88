// The library's single entry point: FSDPEngine for backends fsdp and fsdp2, and VeOmniEngine (plugin/veomni/,
// built into this library) for backend veomni; both model types, cpu and cuda each (plugin.toml.in).
#include "host_api/error.h"
#include "host_api/plugin_api.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/veomni/veomni_registration.h"

namespace enginery {
namespace fsdp {
namespace {

// fsdp and fsdp2 take all their settings from the [engine] table; a [engine.<backend>] table is a mistake the user
// must hear about (DESIGN: a bad config stops before any work).
void reject_backend_options(const EngineArgs& args, const std::string& backend) {
  if (args.engine.backend_options.empty()) return;
  throw EngineryError("unknown option '" + args.engine.backend_options.begin()->first + "' for backend " + backend,
                      "engine." + backend + "." + args.engine.backend_options.begin()->first,
                      "none: set fsdp options in [engine] (mixed_precision, reshard_after_forward, fsdp_size, ...)");
}

void register_fsdp_engines(Registrar& registrar) {
  for (const char* backend : {"fsdp", "fsdp2"}) {
    for (const char* model_type : {"language_model", "value_model"}) {
      for (const char* device : {"cpu", "cuda"}) {
        const std::string strategy = backend;
        registrar.register_engine(EngineKey{model_type, backend, device}, [strategy](const EngineArgs& args) {
          reject_backend_options(args, strategy);
          EngineArgs a = args;
          a.engine.strategy = strategy;  // the registry key decides the sharding strategy
          return std::shared_ptr<BaseEngine>(std::make_shared<FSDPEngine>(std::move(a)));
        });
      }
    }
  }
}

void register_engines(Registrar& registrar) {
  register_fsdp_engines(registrar);
  veomni::register_veomni_engines(registrar);
}

}  // namespace
}  // namespace fsdp
}  // namespace enginery

ENGINERY_DEFINE_PLUGIN("enginery_fsdp", enginery::fsdp::register_engines)
