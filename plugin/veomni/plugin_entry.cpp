// The plugin's single entry point: VeOmniEngine for backend veomni, both model types, cpu and cuda.
#include "host_api/plugin_api.h"
#include "plugin/veomni/veomni_engine.h"

namespace enginery {
namespace veomni {
namespace {

void register_veomni_engines(Registrar& registrar) {
  for (const char* model_type : {"language_model", "value_model"}) {
    for (const char* device : {"cpu", "cuda"}) {
      registrar.register_engine(
          EngineKey{model_type, "veomni", device},
          [](const EngineArgs& args) {
            EngineArgs a = args;
            a.engine.strategy = "veomni";
            return std::shared_ptr<BaseEngine>(std::make_shared<VeOmniEngine>(std::move(a)));
          },
          VeOmniEngine::config_support(device));
    }
  }
}

}  // namespace
}  // namespace veomni
}  // namespace enginery

ENGINERY_DEFINE_PLUGIN("enginery_veomni", enginery::veomni::register_veomni_engines)
