#include "trainer/loop/losses.h"

#include "host_api/error.h"

namespace enginery {
namespace {

torch::Tensor need(const torch::Tensor& t, const char* name) {
  if (!t.defined()) throw EngineryError(std::string("the model produced no ") + name, "loss");
  return t;
}

// The token count of this micro-batch, at least one, for per-micro-batch metric means.
torch::Tensor local_count(const torch::Tensor& mask) { return mask.sum().clamp_min(1.0); }

}  // namespace

LossResult sft_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx) {
  const torch::Tensor log_probs = need(output.log_probs, "log_probs");
  const torch::Tensor mask = batch.at("loss_mask").to(log_probs.dtype());
  LossResult result;
  result.loss = -(log_probs * mask).sum() / ctx.global_num_tokens;
  return result;
}

LossResult ppo_policy_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx, double clip_low,
                           double clip_high, double clip_c) {
  const torch::Tensor log_probs = need(output.log_probs, "log_probs");
  const auto dtype = log_probs.dtype();
  const torch::Tensor mask = batch.at("loss_mask").to(dtype);
  const torch::Tensor old = batch.at("old_log_probs").to(dtype);
  const torch::Tensor adv = batch.at("advantages").to(dtype);

  // Clamped as verl does, so exp never overflows on a stale batch.
  const torch::Tensor log_ratio = (log_probs - old).clamp(-20.0, 20.0);
  const torch::Tensor ratio = torch::exp(log_ratio);
  const torch::Tensor pg1 = -adv * ratio;
  const torch::Tensor pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high);
  const torch::Tensor clipped = torch::maximum(pg1, pg2);
  const torch::Tensor pg3 = -adv * clip_c;
  const torch::Tensor dual = torch::minimum(pg3, clipped);
  const torch::Tensor per_token = torch::where(adv < 0, dual, clipped);

  LossResult result;
  result.loss = (per_token * mask).sum() / ctx.global_num_tokens;
  torch::NoGradGuard no_grad;
  const torch::Tensor n = local_count(mask);
  result.metrics["pg_clipfrac"] = ((pg2 > pg1).to(dtype) * mask).sum() / n;
  result.metrics["pg_clipfrac_lower"] = ((clipped > pg3).logical_and(adv < 0).to(dtype) * mask).sum() / n;
  result.metrics["ppo_kl"] = (-log_ratio * mask).sum() / n;
  return result;
}

LossResult value_loss(const ModelOutput& output, const Batch& batch, const LossContext& ctx, double cliprange) {
  const torch::Tensor values = need(output.values, "values");
  const auto dtype = values.dtype();
  const torch::Tensor mask = batch.at("loss_mask").to(dtype);
  const torch::Tensor old = batch.at("values").to(dtype);
  const torch::Tensor returns = batch.at("returns").to(dtype);

  const torch::Tensor clipped_pred = torch::max(torch::min(values, old + cliprange), old - cliprange);
  const torch::Tensor loss1 = (values - returns).square();
  const torch::Tensor loss2 = (clipped_pred - returns).square();
  const torch::Tensor per_token = torch::maximum(loss1, loss2);

  LossResult result;
  result.loss = 0.5 * (per_token * mask).sum() / ctx.global_num_tokens;
  torch::NoGradGuard no_grad;
  const torch::Tensor n = local_count(mask);
  result.metrics["vf_clipfrac"] = ((loss2 > loss1).to(dtype) * mask).sum() / n;
  result.metrics["vpred_mean"] = (values * mask).sum() / n;
  return result;
}

LossFn make_loss(const LossSection& s) {
  if (s.type == "sft") return sft_loss;
  if (s.type == "ppo") {
    const double low = s.clip_ratio_low.value_or(s.clip_ratio);
    const double high = s.clip_ratio_high.value_or(s.clip_ratio);
    const double c = s.clip_ratio_c;
    return [low, high, c](const ModelOutput& o, const Batch& b, const LossContext& ctx) {
      return ppo_policy_loss(o, b, ctx, low, high, c);
    };
  }
  if (s.type == "value") {
    const double range = s.cliprange_value;
    return [range](const ModelOutput& o, const Batch& b, const LossContext& ctx) {
      return value_loss(o, b, ctx, range);
    };
  }
  throw EngineryError("unknown loss type '" + s.type + "'", "loss.type", "sft, ppo, value");
}

std::vector<std::string> required_inputs(const LossSection& s) {
  if (s.type == "ppo") return {"old_log_probs", "advantages"};
  if (s.type == "value") return {"values", "returns"};
  return {};
}

}  // namespace enginery
