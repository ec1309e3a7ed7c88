// The plugin's single entry point: FSDPEngine for backends fsdp and fsdp2, both model types, cpu and cuda.
#include "host_api/plugin_api.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {
namespace {

void register_fsdp_engines(Registrar& registrar) {
  for (const char* backend : {"fsdp", "fsdp2"}) {
    for (const char* model_type : {"language_model", "value_model"}) {
      for (const char* device : {"cpu", "cuda"}) {
        const std::string strategy = backend;
        registrar.register_engine(EngineKey{model_type, backend, device}, [strategy](const EngineArgs& args) {
          EngineArgs a = args;
          a.engine.strategy = strategy;  // the registry key decides the sharding strategy
          return std::shared_ptr<BaseEngine>(std::make_shared<FSDPEngine>(std::move(a)));
        });
      }
    }
  }
}

}  // namespace
}  // namespace fsdp
}  // namespace enginery

ENGINERY_DEFINE_PLUGIN("enginery_fsdp", enginery::fsdp::register_fsdp_engines)
