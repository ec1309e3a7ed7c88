// FSDPEngine's optimizer calls: zero_grad, the step (the OptimizerStep pipeline wired at initialize,
// optimizer_step.h) and the LR schedule's step.
#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {

void FSDPEngine::optimizer_zero_grad() {
  // The released gradient takes the master shard's device: both must be home.
  require_resident("optimizer_zero_grad", /*model=*/true, /*optimizer=*/false, /*grad=*/true);
  sharded_module("optimizer_zero_grad").zero_grad();
}

void FSDPEngine::wire_optimizer_step() {
  if (!optimizer_) return;
  // place_offloaded_state made the optimizer streamed where engine.param_offload / optimizer_offload asked for it.
  const StepPlacement placement = !optimizer_->streamed() ? StepPlacement::kResident
                                  : options_.host_optimizer_step ? StepPlacement::kOnHost
                                                          : StepPlacement::kStreamed;
  optimizer_step_ = std::make_unique<OptimizerStep>(*fsdp_, *optimizer_, placement, args_.engine.param_offload,
                                                    args_.optim.clip_grad, args_.rank, device_);
}

torch::Tensor FSDPEngine::optimizer_step() {
  require_trainable("optimizer_step");
  if (!optimizer_step_) {
    throw EngineryError("optimizer_step before initialize() built the optimizer",
                        "fsdp engine, rank " + std::to_string(args_.rank));
  }
  require_resident("optimizer_step", true, true, true);
  RECORD_USER_SCOPE("enginery::optimizer_step");
  return optimizer_step_->run(lr_scheduler_->lr(), sharded_grad_scaler());
}

void FSDPEngine::require_trainable(const std::string& what) const {
  if (args_.engine.forward_only) {
    throw EngineryError(what + " on a forward-only engine (it holds no optimizer)",
                        "fsdp engine, rank " + std::to_string(args_.rank) + ", engine.forward_only",
                        "forward_only = false for an engine that trains; infer_batch / forward_only calls here");
  }
}

double FSDPEngine::lr_scheduler_step() {
  require_trainable("lr_scheduler_step");
  if (!lr_scheduler_) {
    throw EngineryError("lr_scheduler_step before initialize()", "fsdp engine, rank " + std::to_string(args_.rank));
  }
  return lr_scheduler_->step();
}

}  // namespace fsdp
}  // namespace enginery
