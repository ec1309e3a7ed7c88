#pragma once
// GRPO's progress line (rank 0, every trainer.log_freq steps), from the step's metrics in verl's names.
#include <cstdint>
#include <map>
#include <string>

namespace enginery {
namespace grpo {

// "step  40/300 | score 0.625 | resp_len 5.0 | entropy 0.412 | kl 0.0013 | clipfrac 0.021 | grad_norm 0.81 |
//  gen 0.42s update 1.10s | ETA 1m02s"; kl only when actor/kl_loss is present.
std::string format_progress(int64_t step, int64_t total, const std::map<std::string, double>& metrics,
                            double eta_s);

}  // namespace grpo
}  // namespace enginery
