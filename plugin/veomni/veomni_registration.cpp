#include "plugin/veomni/veomni_registration.h"

#include "plugin/veomni/veomni_engine.h"

namespace enginery {
namespace veomni {

// VeOmni computes in bf16 or fp32 and has no grad scaler; every other optional operation is FSDPEngine's.
EngineTraits veomni_traits(const std::string& device) {
  EngineTraits traits{VeOmniEngine::config_support(device), {}};
  Capabilities& c = traits.capabilities;
  c.verified_precisions = {c10::kFloat, c10::kBFloat16};
  c.multi_rank = c.checkpoint_same_world = c.temperature = true;
  c.offload = c.weight_export = c.shard_export = c.train_state = true;
  return traits;
}

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
          veomni_traits(device));
    }
  }
}

}  // namespace veomni
}  // namespace enginery
