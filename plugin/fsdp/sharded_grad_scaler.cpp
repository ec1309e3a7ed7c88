#include "plugin/fsdp/sharded_grad_scaler.h"

namespace enginery {
namespace fsdp {

ShardedGradScaler::ShardedGradScaler(const GradScalerConfig& config, const torch::Device& device)
    : growth_factor_(config.growth_factor),
      backoff_factor_(config.backoff_factor),
      growth_interval_(config.growth_interval) {
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  scale_ = torch::full({1}, config.init_scale, fp32);
  growth_tracker_ = torch::zeros({1}, fp32.dtype(torch::kInt));
  found_inf_ = torch::zeros({1}, fp32);
}

ShardedGradScaler::~ShardedGradScaler() = default;

torch::Tensor ShardedGradScaler::scale(const torch::Tensor& loss) {
  return loss * scale_.reshape({}).to(loss.device());
}

double ShardedGradScaler::current_scale() const { return scale_.item<double>(); }

int64_t ShardedGradScaler::growth_tracker() const { return growth_tracker_.item<int64_t>(); }

void ShardedGradScaler::unscale_(const std::vector<torch::Tensor>& grads, const Collectives& dp_group) {
  torch::NoGradGuard no_grad;
  found_inf_.zero_();
  const auto inv_scale = this->inv_scale();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  dp_group.all_reduce(found_inf_, ReduceOp::kMax);
}

torch::Tensor ShardedGradScaler::inv_scale() const {
  return scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);  // as torch.amp.GradScaler
}

void ShardedGradScaler::record_found_inf(const torch::Tensor& non_finite, const Collectives& dp_group) {
  torch::NoGradGuard no_grad;
  found_inf_.copy_(non_finite.reshape({1}));
  dp_group.all_reduce(found_inf_, ReduceOp::kMax);
}

bool ShardedGradScaler::should_skip() {
  last_step_skipped_ = found_inf_.item<float>() > 0.0f;
  return last_step_skipped_;
}

void ShardedGradScaler::update() {
  torch::NoGradGuard no_grad;
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, growth_factor_, backoff_factor_, growth_interval_);
    return;
  }
  // CPU fallback with _amp_update_scale_'s semantics, on tensors (no host sync).
  const auto found = found_inf_ > 0;
  auto tracker = torch::where(found, torch::zeros_like(growth_tracker_), growth_tracker_ + 1);
  const auto grow = torch::logical_and(torch::logical_not(found), tracker >= growth_interval_);
  auto new_scale = torch::where(found, scale_ * backoff_factor_, torch::where(grow, scale_ * growth_factor_, scale_));
  tracker = torch::where(grow, torch::zeros_like(tracker), tracker);
  scale_.copy_(new_scale);
  growth_tracker_.copy_(tracker);
}

}  // namespace fsdp
}  // namespace enginery
