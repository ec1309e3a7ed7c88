#pragma once
// The trainer's losses (verl's, token-mean aggregation). Each returns the sum over this micro-batch's target
// tokens divided by ctx.global_num_tokens (host_api/loss.h), so the sum over micro-batches and ranks is the global
// token mean.
#include "host_api/loss.h"
#include "config/train_config.h"

namespace enginery {

// -sum(log_probs * loss_mask) / N.
LossResult sft_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx);

// PPO clipped policy loss (verl compute_policy_loss_vanilla, dual clip): with r = exp(log_probs - old_log_probs)
// and A the advantages, per token max(-A r, -A clip(r, 1 - low, 1 + high)), and for A < 0 at most -A clip_c.
// Metrics: pg_clipfrac, pg_clipfrac_lower, ppo_kl (token means over this micro-batch).
LossResult ppo_policy_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx, double clip_low,
                           double clip_high, double clip_c);

// Clipped value loss (verl compute_value_loss): 0.5 * max((v - R)^2, (clip(v, old_v - c, old_v + c) - R)^2), with
// v the model's values, old_v the batch's "values", R its "returns". Metrics: vf_clipfrac, vpred_mean.
LossResult value_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx, double cliprange);

// The loss selected by loss.type.
LossFn make_loss(const LossSection& section);

// Batch tensors the selected loss needs besides input_ids / attention_mask / loss_mask.
std::vector<std::string> required_inputs(const LossSection& section);

}  // namespace enginery
