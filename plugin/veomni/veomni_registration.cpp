#include "plugin/veomni/veomni_registration.h"

#include "plugin/veomni/veomni_engine.h"

namespace enginery {
namespace veomni {

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

}  // namespace veomni
}  // namespace enginery
