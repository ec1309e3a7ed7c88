#include "trainer/grpo/kl.h"

#include "host_api/error.h"

namespace enginery {
namespace grpo {

KlType kl_type_from(const std::string& name) {
  if (name == "kl" || name == "k1") return KlType::kK1;
  if (name == "abs") return KlType::kAbs;
  if (name == "mse" || name == "k2") return KlType::kK2;
  if (name == "low_var_kl" || name == "k3") return KlType::kK3;
  throw EngineryError("unknown KL estimator '" + name + "'", "actor.kl_loss_type",
                      "kl, k1, abs, mse, k2, low_var_kl, k3");
}

torch::Tensor kl_penalty(const torch::Tensor& log_probs, const torch::Tensor& ref_log_probs, KlType type) {
  const torch::Tensor diff = log_probs - ref_log_probs;
  switch (type) {
    case KlType::kK1: return diff;
    case KlType::kAbs: return diff.abs();
    case KlType::kK2: return 0.5 * diff.square();
    case KlType::kK3: {
      // verl's clamps: exp of a stale, far-off log-ratio must not overflow, and one token must not dominate.
      const torch::Tensor log_ratio = (-diff).clamp(-20.0, 20.0);
      return (torch::exp(log_ratio) - log_ratio - 1.0).clamp(-10.0, 10.0);
    }
  }
  throw EngineryError("unknown KL estimator", "actor.kl_loss_type");
}

}  // namespace grpo
}  // namespace enginery
