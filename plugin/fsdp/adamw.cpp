#include "plugin/fsdp/adamw.h"

#include <cmath>

namespace enginery {
namespace fsdp {

AdamW::AdamW(std::vector<torch::Tensor> params, std::vector<torch::Tensor> grads, const OptimizerConfig& config)
    : params_(std::move(params)),
      grads_(std::move(grads)),
      beta1_(config.betas[0]),
      beta2_(config.betas[1]),
      eps_(config.eps),
      weight_decay_(config.weight_decay) {
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double bias1 = 1.0 - std::pow(beta1_, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(beta2_, static_cast<double>(step_));
  const double step_size = lr / bias1;
  const double bias2_sqrt = std::sqrt(bias2);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    const auto& g = grads_[i];
    p.mul_(1.0 - lr * weight_decay_);
    exp_avg_[i].lerp_(g, 1.0 - beta1_);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    auto denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(eps_);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

}  // namespace fsdp
}  // namespace enginery
