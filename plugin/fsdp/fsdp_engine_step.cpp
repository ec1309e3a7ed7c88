// FSDPEngine::forward_step (docs/ARCHITECTURE.md, "One step"): autocast in the engine's precision, the loss, and the
// backward with gradient reduction on the host loop's last micro-batch only. The loop itself is the host's
// (forward_backward_batch, engine_driver/step_loop.h).
#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {

MicroBatchResult FSDPEngine::forward_step(const Batch& micro_batch, const LossFn& loss_fn, const LossContext& ctx,
                                          bool forward_only) {
  FsdpModule& module = sharded_module("forward_step");
  models::ModelInputs inputs;
  // The packed micro-batch (host_api/batch.h's [Note: packed batch]); cu_seqlens is read on the host.
  inputs.input_ids = micro_batch.at("input_ids").to(device_);
  inputs.cu_seqlens = micro_batch.at("cu_seqlens");
  if (micro_batch.has("position_ids")) inputs.position_ids = micro_batch.at("position_ids").to(device_);
  inputs.remove_padding = args_.model.use_remove_padding;
  inputs.sequence_parallel = ulysses_.sequence.get();  // null without Ulysses (ulysses.h)
  if (ulysses_.sequence) {
    check_groups_share_micro_batch(inputs.input_ids, inputs.cu_seqlens, world_collectives(), options_.ulysses_size,
                                   option_key(args_.engine, kUlyssesSize));
  }
  models::HeadOptions head;
  head.compute_entropy = ctx.calculate_entropy;
  head.temperature = batch_temperature(micro_batch);

  const bool backward = !forward_only && torch::GradMode::is_enabled();
  if (backward) require_trainable("a training forward_backward_batch");
  require_resident("forward_step", /*model=*/true, /*optimizer=*/false, /*grad=*/backward);
  // Gradients are reduced after the last micro-batch only; earlier ones accumulate unreduced (FSDP's no_sync).
  const bool sync_grads = ctx.is_last_micro_batch();
  MicroBatchResult result;
  {
    // fp32 turns autocast off; the scope clears the autocast cache when it ends.
    RECORD_USER_SCOPE("enginery::forward");
    compat::AutocastScope autocast(device_.type(), autocast_dtype());
    result.output = model_->forward(inputs, head, &module);
  }
  if (!backward) module.after_forward_only();

  if (loss_fn) {
    LossResult loss = loss_fn(result.output, micro_batch.to(device_), ctx);
    result.loss = loss.loss;
    result.metrics = std::move(loss.metrics);
  } else if (backward) {
    throw EngineryError("a training step needs a loss function", "fsdp engine, rank " + std::to_string(args_.rank));
  }
  if (backward) {
    {
      RECORD_USER_SCOPE("enginery::backward");
      module.before_backward(sync_grads);
      GradScaler* scaler = grad_scaler();
      (scaler ? scaler->scale(result.loss) : result.loss).backward();
    }
    RECORD_USER_SCOPE("enginery::after_backward");
    module.after_backward(sync_grads);
  }
  return result;
}

}  // namespace fsdp
}  // namespace enginery
