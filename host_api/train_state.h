#pragma once
// This rank's trainable state, as a torch trainer reads and steers it (docs/ARCHITECTURE.md, "The contract", train
// state; host_api 2.6): each parameter's local piece and its gradient as views of the engine's own storage, and the
// optimizer's hyperparameters, readable and writable between steps. What verl's code reads off an engine as
// `engine.module` (parameters and gradients) and `engine.optimizer.param_groups` (verl's Tinker worker sets lr,
// betas, eps and weight decay per step there). An optional interface, like ShardExportingEngine, so BaseEngine's
// vtable stays that of 2.0; engines that implement it declare the capability `train-state`.
#include <torch/types.h>
#include <cstdint>
#include <string>
#include <vector>

namespace enginery {

// One parameter on this rank: the elements [flat_offset, flat_offset + param.numel()) of the full tensor flattened
// row-major (the pieces of host_api/shard_export.h, the same on every rank in the same order).
struct LocalParameter {
  std::string name;                 // the Hugging Face name
  std::vector<int64_t> full_shape;  // of the full tensor
  int64_t flat_offset = 0;
  torch::Tensor param;  // 1-D fp32 view of the master weights: writes change the model
  torch::Tensor grad;   // 1-D fp32 view of the gradient; undefined while none is held (after zero grad)
};

// AdamW's hyperparameters, torch.optim.AdamW's names. `lr` is the rate the next optimizer_step applies: the
// schedule's until it is written, the written one until the next lr_scheduler_step (as a torch LR scheduler
// overwrites param_group["lr"]).
struct OptimizerHyperparameters {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class TrainStateEngine {
 public:
  virtual ~TrainStateEngine();  // key function: defined out of line in libenginery_host_api
  // Views, valid until the engine changes its storage (a step's first reduction after zero grad, to(), load):
  // ask again after each. Not collective.
  virtual std::vector<LocalParameter> local_parameters() = 0;
  virtual OptimizerHyperparameters optimizer_hyperparameters() const = 0;
  // Takes effect from the next optimizer_step; EngineryError naming the field for a value out of range.
  virtual void set_optimizer_hyperparameters(const OptimizerHyperparameters& values) = 0;
};

}  // namespace enginery
