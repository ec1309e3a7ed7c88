// [engine.<backend>] gradient_checkpointing_policy (docs/ARCHITECTURE.md, "Activation checkpointing"): what backward
// recomputes when model.enable_gradient_checkpointing is on. Read and checked when the engine is built
// (backend_options.cpp), applied here to the model once it is built.
#include <memory>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {

void FSDPEngine::apply_recompute_policy() {
  if (options_.recompute != models::Recompute::kMlp) return;  // "layer" is what the model builds with
  auto* lm = dynamic_cast<models::CausalLM*>(model_.get());
  if (lm == nullptr) {
    throw EngineryError("a " + model_->hf_model_type() + " model built outside models::build_model has no " +
                            "checkpointing policies (models::Recompute)",
                        option_key(args_.engine, kCheckpointingPolicy), "layer");
  }
  lm->set_recompute(options_.recompute);
}

}  // namespace fsdp
}  // namespace enginery
