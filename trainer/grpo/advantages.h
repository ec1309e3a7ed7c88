#pragma once
// GRPO's outcome advantages (verl compute_grpo_outcome_advantage): each response's score relative to the other
// responses to the same prompt, so no critic is needed.
#include <torch/types.h>

#include <cstdint>

namespace enginery {
namespace grpo {

// verl's epsilon: a group whose scores are all equal has std 0 and gets advantage 0, never a division by zero.
constexpr double kAdvantageEpsilon = 1e-6;

// `scores` [G * group_size]: group g is rows [g * group_size, (g + 1) * group_size) (the rollout repeats each
// prompt group_size times in a row). Returns (s - mean_g) / (std_g + eps), std unbiased as torch.std, or s - mean_g
// without `norm_by_std` (algorithm.norm_adv_by_std_in_grpo = false). A group of one has mean 0 and std 1, as in
// verl, so its advantage is its score. Computed in float64, returned as float32 on the scores' device.
torch::Tensor group_advantages(const torch::Tensor& scores, int64_t group_size, bool norm_by_std,
                               double epsilon = kAdvantageEpsilon);

}  // namespace grpo
}  // namespace enginery
