#pragma once
// Per-token estimators of KL(actor || reference) from the two log-probs of the sampled token (verl kl_penalty,
// J. Schulman's k1 / k2 / k3), used by GRPO's KL loss (actor.use_kl_loss).
#include <torch/types.h>

#include <string>

namespace enginery {
namespace grpo {

enum class KlType {
  kK1,   // "kl", "k1": log p - log q
  kAbs,  // "abs": |log p - log q|
  kK2,   // "mse", "k2": (log p - log q)^2 / 2
  kK3,   // "low_var_kl", "k3": q/p - log(q/p) - 1, log(q/p) clamped to [-20, 20] and the result to [-10, 10]
};

// One of actor.kl_loss_type's spellings; anything else is an EngineryError naming the key.
KlType kl_type_from(const std::string& name);

// Element-wise over [batch, seq]; p the actor, q the reference.
torch::Tensor kl_penalty(const torch::Tensor& log_probs, const torch::Tensor& ref_log_probs, KlType type);

}  // namespace grpo
}  // namespace enginery
