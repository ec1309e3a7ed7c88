#include "trainer/grpo/advantages.h"

#include "host_api/error.h"

namespace enginery {
namespace grpo {

torch::Tensor group_advantages(const torch::Tensor& scores, int64_t group_size, bool norm_by_std, double epsilon) {
  if (scores.dim() != 1 || group_size <= 0 || scores.size(0) % group_size != 0) {
    throw EngineryError("scores of shape " + std::to_string(scores.numel()) + " do not form groups of " +
                            std::to_string(group_size),
                        "grpo advantages", "a 1-D tensor whose length is a multiple of rollout.n");
  }
  const torch::Tensor s = scores.to(torch::kDouble).view({-1, group_size});
  torch::Tensor mean = torch::zeros({s.size(0), 1}, s.options());
  torch::Tensor std = torch::ones({s.size(0), 1}, s.options());
  if (group_size > 1) {
    mean = s.mean(1, /*keepdim=*/true);
    std = s.std(1, /*unbiased=*/true, /*keepdim=*/true);
  }
  const torch::Tensor centred = s - mean;
  const torch::Tensor adv = norm_by_std ? centred / (std + epsilon) : centred;
  return adv.reshape({-1}).to(torch::kFloat);
}

}  // namespace grpo
}  // namespace enginery
