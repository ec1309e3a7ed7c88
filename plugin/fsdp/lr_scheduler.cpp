#include "plugin/fsdp/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {

LrScheduler::LrScheduler(const OptimizerConfig& config)
    : base_lr_(config.lr),
      total_(config.total_training_steps),
      min_lr_ratio_(config.min_lr_ratio),
      num_cycles_(config.num_cycles) {
  if (config.lr_scheduler_type == "constant") {
    cosine_ = false;
  } else if (config.lr_scheduler_type == "cosine") {
    cosine_ = true;
  } else {
    throw EngineryError("unknown lr scheduler '" + config.lr_scheduler_type + "'", "optim.lr_scheduler_type",
                        "constant, cosine");
  }
  if (min_lr_ratio_ < 0.0 || min_lr_ratio_ > 1.0) {
    throw EngineryError("min_lr_ratio " + std::to_string(min_lr_ratio_) + " out of range", "optim.min_lr_ratio",
                        "0 <= min_lr_ratio <= 1");
  }
  // As verl: a non-positive lr_warmup_steps means "use the ratio of total_training_steps".
  warmup_ = config.lr_warmup_steps > 0
                ? config.lr_warmup_steps
                : static_cast<int64_t>(config.lr_warmup_steps_ratio * static_cast<double>(total_));
}

double LrScheduler::multiplier(int64_t step) const {
  const double s = static_cast<double>(step);
  if (!cosine_) {
    return step < warmup_ ? s / std::max(1.0, static_cast<double>(warmup_)) : 1.0;
  }
  if (step < warmup_) {
    return min_lr_ratio_ + (1.0 - min_lr_ratio_) * s / std::max<double>(1.0, static_cast<double>(warmup_));
  }
  const double progress =
      (s - static_cast<double>(warmup_)) / std::max<double>(1.0, static_cast<double>(total_ - warmup_));
  const double x = std::cos(M_PI * num_cycles_ * 2.0 * progress);
  const double coef = (1.0 - min_lr_ratio_) * 0.5, intercept = (1.0 + min_lr_ratio_) * 0.5;
  return std::max(min_lr_ratio_, x * coef + intercept);
}

double LrScheduler::lr() const { return lr_override_ ? *lr_override_ : base_lr_ * multiplier(step_); }

double LrScheduler::step() {
  ++step_;
  lr_override_.reset();
  return lr();
}

}  // namespace fsdp
}  // namespace enginery
