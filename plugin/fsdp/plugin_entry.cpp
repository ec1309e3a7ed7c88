// The library's single entry point: FSDPEngine for backends fsdp and fsdp2, and VeOmniEngine (plugin/veomni/,
// built into this library) for backend veomni; both model types, cpu and cuda each (the top-level plugin.toml).
#include "host_api/plugin_api.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/veomni/veomni_registration.h"

namespace enginery {
namespace fsdp {
namespace {

void register_fsdp_engines(Registrar& registrar) {
  for (const char* backend : {"fsdp", "fsdp2"}) {
    for (const char* model_type : {"language_model", "value_model"}) {
      for (const char* device : {"cpu", "cuda"}) {
        const std::string name = backend;
        registrar.register_engine(
            EngineKey{model_type, backend, device},
            [name](const EngineArgs& args) {
              EngineArgs a = args;
              a.engine.strategy = name;  // the registry key decides the backend, hence the shard layout
              return std::shared_ptr<BaseEngine>(std::make_shared<FSDPEngine>(std::move(a)));
            },
            FSDPEngine::config_support(device));
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
