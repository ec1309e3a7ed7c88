#pragma once
// The host's micro-batch loop, the same for every engine (docs/ARCHITECTURE.md, "One step"): checks the batch
// (engine_driver/batch_check.h; every rank stops when one refuses its batch, and when a loss function is given but
// no rank has a target token), splits it by engine.micro_batch_size_per_gpu, counts the target tokens of all ranks
// once (loss_mask[:, 1:], checked that every rank has as many micro-batches), runs the engine's forward_step on
// each, sums the losses, averages the metrics and concatenates the outputs in order. Collective. `limits`: what the
// host knows of the model (the vocabulary the token ids are checked against); without, ids are checked >= 0 only.
#include "engine_driver/batch_check.h"
#include "host_api/base_engine.h"

namespace enginery {

// Results of forward_backward_batch / train_batch / infer_batch.
struct BatchOutput {
  torch::Tensor loss;                               // sum of the micro-batch losses (the global token mean)
  std::map<std::string, torch::Tensor> outputs;     // "log_probs", "entropy", "values": micro-batches in order
  std::map<std::string, torch::Tensor> metrics;     // loss-function metrics, averaged over micro-batches
  torch::Tensor grad_norm;                          // train_batch only; may be non-finite (the step was skipped)
  double lr = 0.0;                                  // train_batch only: what lr_scheduler_step returned (as verl)
};

BatchOutput forward_backward_batch(BaseEngine& engine, const Batch& batch, const LossFn& loss_fn, bool forward_only,
                                   const BatchLimits& limits = {});
// zero grad -> forward_backward_batch -> optimizer_step -> lr_scheduler_step.
BatchOutput train_batch(BaseEngine& engine, const Batch& batch, const LossFn& loss_fn,
                        const BatchLimits& limits = {});
// forward_only under eval mode and no-grad; loss_fn may be empty.
BatchOutput infer_batch(BaseEngine& engine, const Batch& batch, const LossFn& loss_fn = {},
                        const BatchLimits& limits = {});

}  // namespace enginery
