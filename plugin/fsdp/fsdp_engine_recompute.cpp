// [engine.<backend>] gradient_checkpointing_policy (docs/ARCHITECTURE.md, "Activation checkpointing"): what backward
// recomputes when model.enable_gradient_checkpointing is on. Checked when the engine is built, before any work;
// applied to the model once it is built.
#include <memory>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {

models::Recompute FSDPEngine::recompute_wanted(const EngineArgs& args) {
  const std::string policy = backend_option<std::string>(args.engine, kCheckpointingPolicy, "layer");
  return models::recompute_policy(args.model.enable_gradient_checkpointing, policy,
                                  "engine." + args.engine.strategy + "." + kCheckpointingPolicy);
}

void FSDPEngine::apply_recompute_policy() {
  if (recompute_ != models::Recompute::kMlp) return;  // "layer" is what the model builds with
  auto* lm = dynamic_cast<models::CausalLM*>(model_.get());
  if (lm == nullptr) {
    throw EngineryError("a " + model_->hf_model_type() + " model built outside models::build_model has no " +
                            "checkpointing policies (models::Recompute)",
                        "engine." + args_.engine.strategy + "." + kCheckpointingPolicy, "layer");
  }
  lm->set_recompute(recompute_);
}

}  // namespace fsdp
}  // namespace enginery
