#include "trainer/grpo/grpo_loss.h"

#include "host_api/error.h"
#include "trainer/loop/losses.h"

namespace enginery {
namespace grpo {

PolicyLossOptions policy_loss_options(const ActorSection& a) {
  PolicyLossOptions o;
  o.clip_low = a.clip_ratio_low.value_or(a.clip_ratio);
  o.clip_high = a.clip_ratio_high.value_or(a.clip_ratio);
  o.clip_c = a.clip_ratio_c;
  o.use_kl = a.use_kl_loss;
  o.kl_coef = a.kl_loss_coef;
  o.kl_type = kl_type_from(a.kl_loss_type);
  o.entropy_coeff = a.entropy_coeff;
  return o;
}

LossResult policy_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx,
                       const PolicyLossOptions& o) {
  // The clipped term is the offline PPO loss's (trainer/loop/losses.h), written once.
  LossResult result = ppo_policy_loss(output, batch, ctx, o.clip_low, o.clip_high, o.clip_c);
  const torch::Tensor& log_probs = output.log_probs;
  const torch::Tensor mask = batch.at("loss_mask").to(log_probs.dtype());
  const torch::Tensor local_tokens = mask.sum().clamp_min(1.0);
  result.metrics["pg_loss"] = result.loss.detach() * ctx.global_num_tokens / local_tokens;
  if (o.use_kl) {
    const torch::Tensor ref = batch.at("ref_log_probs").to(log_probs.dtype());
    const torch::Tensor kl_sum = (kl_penalty(log_probs, ref, o.kl_type) * mask).sum();
    result.loss = result.loss + o.kl_coef * kl_sum / ctx.global_num_tokens;
    result.metrics["kl_loss"] = kl_sum.detach() / local_tokens;
  }
  if (o.entropy_coeff != 0.0) {
    if (!output.entropy.defined()) {
      throw EngineryError("the model produced no entropy", "actor.entropy_coeff",
                          "a micro-batch with calculate_entropy = true");
    }
    const torch::Tensor entropy_sum = (output.entropy.to(log_probs.dtype()) * mask).sum();
    result.loss = result.loss - o.entropy_coeff * entropy_sum / ctx.global_num_tokens;
    result.metrics["entropy_loss"] = entropy_sum.detach() / local_tokens;
  }
  return result;
}

LossFn make_policy_loss(const PolicyLossOptions& options) {
  return [options](const ModelOutput& o, const Batch& b, const LossContext& ctx) {
    return policy_loss(o, b, ctx, options);
  };
}

}  // namespace grpo
}  // namespace enginery
