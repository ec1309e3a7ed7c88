#pragma once
// verl's schedules (verl/utils/torch_functional.py): constant with linear warmup, and cosine with warmup, a floor
// (min_lr_ratio) and num_cycles. The multiplier follows LambdaLR: lr(step) = base_lr * lambda(step), step 0 at
// construction, +1 per step().
#include <cstdint>
#include <optional>

#include "host_api/config.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

class ENGINERY_FSDP_API LrScheduler {
 public:
  explicit LrScheduler(const OptimizerConfig& config);  // throws on an unknown lr_scheduler_type

  double lr() const;        // for the current step: the schedule's, or the one set_lr wrote
  double step();            // advance, return the new lr (the schedule's again, as a torch LR scheduler's step
                            // overwrites a param_group["lr"] written by hand)
  void set_lr(double lr) { lr_override_ = lr; }
  int64_t current_step() const { return step_; }
  // A loaded checkpoint's step; the schedule's lr holds again (a hand-written lr is not part of a checkpoint).
  void set_current_step(int64_t step) {
    step_ = step;
    lr_override_.reset();
  }
  int64_t warmup_steps() const { return warmup_; }
  double multiplier(int64_t step) const;

 private:
  double base_lr_;
  bool cosine_;
  int64_t warmup_;
  int64_t total_;
  double min_lr_ratio_;
  double num_cycles_;
  int64_t step_ = 0;
  std::optional<double> lr_override_;
};

}  // namespace fsdp
}  // namespace enginery
