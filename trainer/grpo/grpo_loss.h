#pragma once
// GRPO's policy loss (verl's actor update with token-mean aggregation): the PPO clipped loss on group advantages,
// plus kl_loss_coef times a KL estimator to the frozen reference, minus entropy_coeff times the entropy. Every
// term is a sum over this micro-batch's target tokens divided by ctx.global_num_tokens (host_api/loss.h).
#include "host_api/loss.h"
#include "trainer/grpo/kl.h"
#include "config/train_config.h"

namespace enginery {
namespace grpo {

struct PolicyLossOptions {
  double clip_low = 0.2;
  double clip_high = 0.2;
  double clip_c = 3.0;
  bool use_kl = false;
  double kl_coef = 0.0;
  KlType kl_type = KlType::kK3;
  double entropy_coeff = 0.0;
};

PolicyLossOptions policy_loss_options(const ActorSection& actor);

// Reads loss_mask, old_log_probs, advantages and, with use_kl, ref_log_probs from the micro-batch; the model's
// entropy when entropy_coeff != 0. Metrics (token means over this micro-batch): pg_loss, pg_clipfrac,
// pg_clipfrac_lower, ppo_kl, and kl_loss / entropy_loss when those terms are on (verl's names under actor/).
LossResult policy_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx,
                       const PolicyLossOptions& options);

LossFn make_policy_loss(const PolicyLossOptions& options);

}  // namespace grpo
}  // namespace enginery
