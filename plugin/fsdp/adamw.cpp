#include "plugin/fsdp/adamw.h"

#include <cmath>

#include "host_api/error.h"
#include "kernels/fused_cuda.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {

AdamW::AdamW(std::vector<torch::Tensor> params, std::vector<torch::Tensor> grads, const OptimizerConfig& config)
    : params_(std::move(params)),
      grads_(std::move(grads)),
      beta1_(config.betas[0]),
      beta2_(config.betas[1]),
      eps_(config.eps),
      weight_decay_(config.weight_decay) {
  bool all_cuda_fp32 = !params_.empty();
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
    all_cuda_fp32 = all_cuda_fp32 && p.is_cuda() && p.scalar_type() == torch::kFloat && p.is_contiguous();
  }
  own_kernel_ = all_cuda_fp32 && kernels::available(kernels::Kernel::kAdamw);
  fused_ = all_cuda_fp32;
  if (fused_) {
    for (const auto& p : params_) device_steps_.push_back(torch::zeros({}, p.options()));
  }
}

int64_t AdamW::step_count() const {
  if (fused_) return static_cast<int64_t>(device_steps_.front().item<double>());
  return step_;
}

void AdamW::set_step_count(int64_t step) {
  step_ = step;
  for (auto& s : device_steps_) s.fill_(static_cast<double>(step));
}

void AdamW::set_hyperparameters(double beta1, double beta2, double eps, double weight_decay) {
  beta1_ = beta1;
  beta2_ = beta2;
  eps_ = eps;
  weight_decay_ = weight_decay;
}

void AdamW::promote_grads_to_param_dtype() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < grads_.size(); ++i) {
    auto& g = grads_[i];
    if (g.defined() && g.scalar_type() != params_[i].scalar_type()) g.set_data(g.to(params_[i].scalar_type()));
  }
}

void AdamW::advance_device_steps(const torch::Tensor& found_inf) {
  if (found_inf.defined()) {
    auto inc = (1.0 - found_inf.to(torch::kFloat)).reshape({});
    for (auto& s : device_steps_) s.add_(inc);
  } else {
    for (auto& s : device_steps_) s.add_(1.0);
  }
}

void AdamW::step_fused(double lr, const torch::Tensor& grad_scale, const torch::Tensor& found_inf) {
  if (!fused_ || copies_) {
    throw EngineryError("needs resident CUDA fp32 shards and enginery's kernels or LibTorch 2.1+", "AdamW::step_fused");
  }
  torch::NoGradGuard no_grad;
  ++step_;
  advance_device_steps(found_inf);
  if (own_kernel_) {
    for (size_t i = 0; i < params_.size(); ++i) {
      kernels::adamw_(params_[i], grads_[i], exp_avg_[i], exp_avg_sq_[i], device_steps_[i], lr, beta1_, beta2_, eps_,
                      weight_decay_, grad_scale, found_inf);
    }
    return;
  }
  promote_grads_to_param_dtype();
  compat::fused_adamw_(params_, grads_, exp_avg_, exp_avg_sq_, device_steps_, lr, beta1_, beta2_, weight_decay_, eps_,
                       grad_scale, found_inf);
}

void AdamW::step(double lr) {
  if (copies_) {
    step_streamed(lr, {}, torch::Tensor(), torch::Tensor());
    return;
  }
  if (fused_) {
    step_fused(lr, torch::Tensor(), torch::Tensor());
    return;
  }
  torch::NoGradGuard no_grad;
  promote_grads_to_param_dtype();
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    update_one(i, params_[i], grads_[i], exp_avg_[i], exp_avg_sq_[i], lr, torch::Tensor(), torch::Tensor());
  }
}

void AdamW::update_one(size_t i, torch::Tensor& p, const torch::Tensor& g, torch::Tensor& exp_avg,
                       torch::Tensor& exp_avg_sq, double lr, const torch::Tensor& grad_scale,
                       const torch::Tensor& found_inf) {
  if (fused_ && own_kernel_) {
    kernels::adamw_(p, g, exp_avg, exp_avg_sq, device_steps_[i], lr, beta1_, beta2_, eps_, weight_decay_, grad_scale,
                    found_inf);
    return;
  }
  if (fused_) {
    const torch::Tensor grad = g.scalar_type() == p.scalar_type() ? g : g.to(p.scalar_type());
    compat::fused_adamw_({p}, {grad}, {exp_avg}, {exp_avg_sq}, {device_steps_[i]}, lr, beta1_, beta2_, weight_decay_,
                         eps_, grad_scale, found_inf);
    return;
  }
  update_plain(p, g, exp_avg, exp_avg_sq, lr);
}

void AdamW::update_plain(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                         double lr) {
  const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(step_));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  p.mul_(1.0 - lr * weight_decay_);
  exp_avg.lerp_(g, 1.0 - beta1_);
  exp_avg_sq.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
  auto denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(eps_);
  p.addcdiv_(exp_avg, denom, -step_size);
}

}  // namespace fsdp
}  // namespace enginery
