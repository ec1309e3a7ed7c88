#pragma once
// AdamW over flat fp32 master shards (llm.c style), with torch.optim.AdamW's math: decoupled weight decay
// (p *= 1 - lr*wd), bias-corrected moments, denom = sqrt(v)/sqrt(1-b2^t) + eps. State tensors are exposed for
// checkpoints. Elementwise, so a shard updates exactly as the same elements of the full tensor would. The plain
// loop (reference, CPU) sits next to the fused CUDA paths: enginery's own kernel (kernels/cuda/adamw.cu: one pass per
// shard, bf16 gradients read as they are) where built, else torch's fused=True multi-tensor AdamW.
#include <torch/torch.h>

#include <vector>

#include "host_api/config.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

class ENGINERY_FSDP_API AdamW {
 public:
  // `params` and `grads` are paired, same shapes; params fp32, grads fp32 or bf16 (a holder may switch a grad
  // tensor's dtype in place with set_data). Both are held, not copied.
  AdamW(std::vector<torch::Tensor> params, std::vector<torch::Tensor> grads, const OptimizerConfig& config);

  void step(double lr);
  // The whole update in one multi-tensor kernel without a host synchronisation: grads are divided by grad_scale
  // (1 element; undefined = 1) and a non-zero found_inf (1 element) skips the update and the step count on device.
  // Only where fused() (CUDA shards, LibTorch 2.1+); step() takes it there too, with neither tensor.
  void step_fused(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf);
  bool fused() const { return fused_; }
  // Gives every gradient its param's dtype (fp32). step() and step_fused() do it themselves where they need it
  // (all but enginery's kernel, which reads bf16 as it is); callers that modify grads in place before a step
  // (unscale, clip) call it first.
  void promote_grads_to_param_dtype();
  // Steps taken (skipped ones not counted). Reads the device counters on the fused path (a synchronisation).
  int64_t step_count() const;

  std::vector<torch::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<torch::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  std::vector<torch::Tensor>& params() { return params_; }
  std::vector<torch::Tensor>& grads() { return grads_; }
  // Fused path only (empty otherwise): the per-parameter step counters the kernel reads on the device.
  std::vector<torch::Tensor>& device_steps() { return device_steps_; }
  void set_step_count(int64_t step);

 private:
  std::vector<torch::Tensor> params_, grads_, exp_avg_, exp_avg_sq_;
  std::vector<torch::Tensor> device_steps_;  // fused path: fp32 scalar per param, the kernel's bias-correction step
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t step_ = 0;
  bool fused_ = false;
  bool own_kernel_ = false;  // fused_ through kernels::adamw_ rather than ATen's multi-tensor fused AdamW
};

}  // namespace fsdp
}  // namespace enginery
