#pragma once
// The optimizer step (docs/ARCHITECTURE.md, "Precision"), one pipeline wherever the step runs:
//   global grad norm (unscaled) -> clip -> fused device update, or skip / step -> grad scaler update.
// The placement (where gradients, masters and moments live while the step runs) changes how each stage reaches the
// gradients, never the stages or their order:
//   - resident: the scaler's unscale_ rewrites the gradients (and records found_inf from them), the norm is taken
//     from the unscaled gradients, and the clip rewrites them in place;
//   - streamed and on host (engine.param_offload / engine.optimizer_offload): the gradients never sit on the device
//     all at once. The norm comes from each shard's norm, taken on the device when its reduction produced the
//     gradient (FsdpUnit::shard_grad_norm), so no gradient is uploaded for it. With the grad scaler it is the norm
//     of the scaled gradients times 1/scale: the scale is a power of two, so this is exactly the norm of the
//     unscaled gradients (every square and sum scales by an exact power of two), and found_inf is a non-finite
//     norm (an inf or nan in any gradient, or a sum of squares beyond fp32, which needs gradients above 1e19).
//     Unscale and clip become multipliers the update applies to each staged gradient as it passes, in the
//     resident order (AdamW::step_streamed, AdamW::step_on_host).
// Each placement keeps its own order of floating-point operations: on the same values the resident and streamed
// steps agree bitwise (tests/fsdp/fsdp_param_offload_test.cpp), and a resumed run continues bitwise.
#include <torch/torch.h>

#include <vector>

#include "plugin/fsdp/adamw.h"
#include "plugin/fsdp/fsdp_export.h"
#include "plugin/fsdp/fsdp_module.h"
#include "plugin/fsdp/sharded_grad_scaler.h"

namespace enginery {
namespace fsdp {

// Where the optimizer step runs, as the engine's offload keys chose it at initialize.
enum class StepPlacement {
  kResident,  // everything on the device: AdamW::step / step_fused
  kStreamed,  // state kept on the host, each shard staged through the device (AdamW::step_streamed)
  kOnHost,    // engine.<backend>.offload_step = "host": the update runs on the CPU (AdamW::step_on_host)
};

class ENGINERY_FSDP_API OptimizerStep {
 public:
  // `optimizer` steps the units' master shards of `module` (its params and grads are the units' tensors, in unit
  // order); both outlive this object. `grads_on_host`: engine.param_offload, the shard gradients live in host
  // memory (the staged update promotes each as it passes). `clip_grad` <= 0: no clipping. `rank` says a skipped
  // step once, on rank 0.
  OptimizerStep(FsdpModule& module, AdamW& optimizer, StepPlacement placement, bool grads_on_host, double clip_grad,
                int64_t rank, const torch::Device& device);

  // One step at `lr`, with the engine's grad scaler (null without one). Collective over the module's groups.
  // Returns the global grad norm before clipping (non-finite: the step was skipped on every rank).
  torch::Tensor run(double lr, ShardedGradScaler* scaler);

 private:
  // Unscale and clip write the resident gradients; elsewhere they are multipliers applied as the shards pass.
  bool rewrites_grads_in_place() const { return placement_ == StepPlacement::kResident; }
  // The norm over the shard group, of the unscaled gradients; records the scaler's found_inf (collective).
  torch::Tensor global_norm(ShardedGradScaler* scaler);
  // Everything on the device, no host synchronisation: the clip coefficient becomes the fused kernel's grad
  // divisor and a non-finite norm skips the update there, on every rank alike (the norm is the all-reduced one).
  void update_on_device(const torch::Tensor& norm, double lr);
  // The update once unscale and clip are settled: `grad_multipliers` (streamed, on host) in order.
  void update(double lr, const std::vector<torch::Tensor>& grad_multipliers);
  // Whether this step is skipped (the scaler's found_inf, else a non-finite norm), said once on rank 0.
  bool skip(const torch::Tensor& norm, ShardedGradScaler* scaler) const;
  // Whether the staged update wrote every unit's compute copy from the updated masters (FsdpUnit::compute_copy).
  void compute_copies_written(bool written);

  FsdpModule& module_;
  AdamW& optimizer_;
  StepPlacement placement_;
  bool grads_on_host_;
  double clip_grad_;
  int64_t rank_;
  torch::Device device_;
};

}  // namespace fsdp
}  // namespace enginery
