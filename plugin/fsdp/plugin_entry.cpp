// The library's single entry point: FSDPEngine for backends fsdp and fsdp2, and VeOmniEngine (plugin/veomni/,
// built into this library) for backend veomni; both model types, cpu and cuda each (the top-level plugin.toml).
#include "host_api/plugin_api.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/veomni/veomni_registration.h"

namespace enginery {
namespace fsdp {
namespace {

// What FSDPEngine declares on `device`: its configuration, and every optional operation of the contract.
EngineTraits fsdp_traits(const std::string& device) {
  EngineTraits traits{FSDPEngine::config_support(device), {}};
  Capabilities& c = traits.capabilities;
  // The precisions the conformance suite runs: fp16 (with the sharded grad scaler) on CUDA only.
  c.verified_precisions = {c10::kFloat, c10::kBFloat16};
  if (device == "cuda") c.verified_precisions.push_back(c10::kHalf);
  c.multi_rank = c.checkpoint_same_world = c.grad_scaler = c.temperature = true;
  c.offload = c.weight_export = c.shard_export = c.train_state = true;
  return traits;
}

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
            fsdp_traits(device));
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
