#pragma once
// Plain AdamW over flat fp32 master shards (llm.c style), with torch.optim.AdamW's math: decoupled weight decay
// (p *= 1 - lr*wd), bias-corrected moments, denom = sqrt(v)/sqrt(1-b2^t) + eps. State tensors are exposed for
// checkpoints. Elementwise, so a shard updates exactly as the same elements of the full tensor would.
#include <torch/torch.h>

#include <vector>

#include "host_api/config.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

class ENGINERY_FSDP_API AdamW {
 public:
  // `params` and `grads` are paired, same shapes, fp32; they are held (not copied).
  AdamW(std::vector<torch::Tensor> params, std::vector<torch::Tensor> grads, const OptimizerConfig& config);

  void step(double lr);
  int64_t step_count() const { return step_; }

  std::vector<torch::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<torch::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  std::vector<torch::Tensor>& params() { return params_; }
  std::vector<torch::Tensor>& grads() { return grads_; }
  void set_step_count(int64_t step) { step_ = step; }

 private:
  std::vector<torch::Tensor> params_, grads_, exp_avg_, exp_avg_sq_;
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t step_ = 0;
};

}  // namespace fsdp
}  // namespace enginery
