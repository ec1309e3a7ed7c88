#pragma once
// AdamW over flat fp32 master shards (llm.c style), with torch.optim.AdamW's math: decoupled weight decay
// (p *= 1 - lr*wd), bias-corrected moments, denom = sqrt(v)/sqrt(1-b2^t) + eps. State tensors are exposed for
// checkpoints. Elementwise, so a shard updates exactly as the same elements of the full tensor would. The plain
// loop (reference, CPU) sits next to the fused CUDA paths: enginery's own kernel (kernels/cuda/adamw.cu: one pass per
// shard, bf16 gradients read as they are) where built, else torch's fused=True multi-tensor AdamW.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "host_api/config.h"
#include "plugin/fsdp/copy_stream.h"
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
  // torch.optim.AdamW's param_group values, read at every step (a change applies from the next one).
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  void set_hyperparameters(double beta1, double beta2, double eps, double weight_decay);

  // engine.param_offload / engine.optimizer_offload (adamw_streamed.cpp): the step runs unit by unit on the device,
  // each shard's host-resident parts (params and grads when `params_on_host`, exp_avg and exp_avg_sq when
  // `state_on_host`, which this moves there) uploaded one unit ahead and the updated ones downloaded behind it,
  // with the very kernel of the resident step (elementwise, so per shard equals all at once). On a CPU engine
  // the same staging runs with plain copies.
  void stream_through(std::shared_ptr<CopyStream> copies, bool params_on_host, bool state_on_host);
  bool streamed() const { return copies_ != nullptr; }
  // Host tensors, one per param (undefined to skip), that step_streamed writes with each updated param cast to
  // their dtype: the units' compute copies (FsdpUnit::compute_copy), so the next forward uploads half the bytes.
  void set_compute_copies(std::vector<torch::Tensor> copies) { compute_copies_ = std::move(copies); }
  // The streamed step. Each staged gradient is first multiplied by `grad_multipliers` in order (the grad scaler's
  // 1/scale, the clip coefficient: device tensors of one element), then the update runs; `grad_scale` and
  // `found_inf` as for step_fused (fused() only).
  void step_streamed(double lr, const std::vector<torch::Tensor>& grad_multipliers, const torch::Tensor& grad_scale,
                     const torch::Tensor& found_inf);
  // The alternative with params, grads and state all on the host (engine.<backend>.offload_step = host): one fused,
  // multithreaded pass over each shard's host memory; nothing crosses the bus. Agrees with the other steps to fp32
  // rounding (not bitwise: the arithmetic is arranged differently).
  void step_on_host(double lr, const std::vector<torch::Tensor>& grad_multipliers);

 private:
  // One shard's update: the fused kernel where fused(), else the reference math with this step's bias terms.
  void update_one(size_t i, torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                  torch::Tensor& exp_avg_sq, double lr, const torch::Tensor& grad_scale,
                  const torch::Tensor& found_inf);
  void update_plain(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                    torch::Tensor& exp_avg_sq, double lr);
  void advance_device_steps(const torch::Tensor& found_inf);

  std::vector<torch::Tensor> params_, grads_, exp_avg_, exp_avg_sq_;
  std::vector<torch::Tensor> device_steps_;  // fused path: fp32 scalar per param, the kernel's bias-correction step
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t step_ = 0;
  bool fused_ = false;
  bool own_kernel_ = false;  // fused_ through kernels::adamw_ rather than ATen's multi-tensor fused AdamW
  std::shared_ptr<CopyStream> copies_;  // streamed step (engine.param_offload / optimizer_offload)
  bool params_on_host_ = false, state_on_host_ = false;
  std::vector<torch::Tensor> compute_copies_;  // see set_compute_copies
};

}  // namespace fsdp
}  // namespace enginery
