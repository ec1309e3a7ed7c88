#pragma once
#include <torch/types.h>

#include <cstdint>

namespace enginery {

// The loss-scaling contract an engine exposes through BaseEngine::grad_scaler() (non-null only when the engine
// scales, i.e. param_dtype fp16 by default). The sharded implementation lives in the fsdp plugin; the sequence
// an engine runs per step is scale(loss).backward() -> unscale_() -> clip -> step-or-skip -> update().
class GradScaler {
 public:
  virtual ~GradScaler();
  virtual torch::Tensor scale(const torch::Tensor& loss) = 0;  // loss * current scale
  virtual double current_scale() const = 0;                     // host read; not for hot paths
  virtual int64_t growth_tracker() const = 0;
  virtual bool last_step_skipped() const = 0;  // some rank saw a non-finite gradient: every rank skipped
  virtual double growth_factor() const = 0;
  virtual double backoff_factor() const = 0;
  virtual int64_t growth_interval() const = 0;
};

}  // namespace enginery
