// The trainer's losses against float64 loops written here from verl's formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "trainer/loop/losses.h"

namespace enginery {
namespace {

struct Data {
  torch::Tensor log_probs, old, adv, mask, values, old_values, returns;
};

Data make_data(int64_t b, int64_t t) {
  torch::manual_seed(3);
  Data d;
  d.log_probs = -torch::rand({b, t}, torch::kDouble) * 3;
  d.old = d.log_probs + 0.4 * torch::randn({b, t}, torch::kDouble);  // ratios well outside [0.8, 1.2]
  d.adv = torch::randn({b, t}, torch::kDouble);
  d.mask = (torch::rand({b, t}) > 0.3).to(torch::kFloat);
  d.mask.select(1, 0).zero_();
  d.values = torch::randn({b, t}, torch::kDouble);
  d.old_values = d.values + 0.8 * torch::randn({b, t}, torch::kDouble);
  d.returns = torch::randn({b, t}, torch::kDouble);
  return d;
}

Batch batch_of(const Data& d) {
  Batch b;
  b.set("loss_mask", d.mask);
  b.set("old_log_probs", d.old.to(torch::kFloat));
  b.set("advantages", d.adv.to(torch::kFloat));
  b.set("values", d.old_values.to(torch::kFloat));
  b.set("returns", d.returns.to(torch::kFloat));
  return b;
}

double at(const torch::Tensor& t, int64_t i, int64_t j) { return t[i][j].item<double>(); }

TEST(Losses, SftIsTokenSumOverGlobalCount) {
  Data d = make_data(4, 9);
  ModelOutput out;
  out.log_probs = d.log_probs.to(torch::kFloat);
  Batch batch = batch_of(d);
  double sum = 0, count = 0;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 9; ++j) {
      if (at(d.mask, i, j) > 0) sum -= at(d.log_probs, i, j), count += 1;
    }
  }
  LossContext ctx;
  ctx.global_num_tokens = count;
  EXPECT_NEAR(sft_loss(out, batch, ctx).loss.item<double>(), sum / count, 1e-5);

  // Two micro-batches with the global count sum to the token mean of the whole batch (verl batch_num_tokens).
  double split = 0;
  for (int64_t part = 0; part < 2; ++part) {
    ModelOutput o;
    o.log_probs = out.log_probs.slice(0, 2 * part, 2 * part + 2);
    split += sft_loss(o, batch.slice(2 * part, 2 * part + 2), ctx).loss.item<double>();
  }
  EXPECT_NEAR(split, sum / count, 1e-5);
}

TEST(Losses, PpoClippedPolicyLossMatchesFloat64Reference) {
  Data d = make_data(5, 11);
  const double low = 0.2, high = 0.28, clip_c = 3.0;
  ModelOutput out;
  out.log_probs = d.log_probs.to(torch::kFloat).requires_grad_(true);
  Batch batch = batch_of(d);
  double sum = 0, count = 0, clipped = 0, lower = 0;
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 11; ++j) {
      if (at(d.mask, i, j) == 0) continue;
      const double lp = static_cast<float>(at(d.log_probs, i, j)), old = static_cast<float>(at(d.old, i, j));
      const double a = static_cast<float>(at(d.adv, i, j));
      const double r = std::exp(lp - old);
      const double l1 = -a * r, l2 = -a * std::min(std::max(r, 1 - low), 1 + high);
      const double cl = std::max(l1, l2);
      double l = cl;
      if (a < 0) l = std::min(cl, -a * clip_c);
      sum += l;
      count += 1;
      clipped += l2 > l1 ? 1 : 0;
      lower += (a < 0 && cl > -a * clip_c) ? 1 : 0;
    }
  }
  LossContext ctx;
  ctx.global_num_tokens = 2 * count;  // as if another rank held as many tokens
  LossResult r = ppo_policy_loss(out, batch, ctx, low, high, clip_c);
  EXPECT_NEAR(r.loss.item<double>(), sum / (2 * count), 1e-5);
  EXPECT_NEAR(r.metrics.at("pg_clipfrac").item<double>(), clipped / count, 1e-6);
  EXPECT_NEAR(r.metrics.at("pg_clipfrac_lower").item<double>(), lower / count, 1e-6);
  EXPECT_GT(clipped, 0);  // the data exercises the clip
  r.loss.backward();
  // Gradient: zero where clipped (and on masked tokens), -A r / N where not.
  const auto grad = out.log_probs.grad();
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 11; ++j) {
      const double lp = static_cast<float>(at(d.log_probs, i, j)), old = static_cast<float>(at(d.old, i, j));
      const double a = static_cast<float>(at(d.adv, i, j));
      const double rr = std::exp(lp - old);
      const double l1 = -a * rr, l2 = -a * std::min(std::max(rr, 1 - low), 1 + high);
      double g = (l1 >= l2) ? -a * rr : 0.0;
      if (a < 0 && std::max(l1, l2) > -a * clip_c) g = 0.0;
      if (at(d.mask, i, j) == 0) g = 0.0;
      EXPECT_NEAR(at(grad, i, j), g / (2 * count), 1e-5) << i << "," << j;
    }
  }
}

TEST(Losses, ClippedValueLossMatchesFloat64Reference) {
  Data d = make_data(3, 7);
  const double range = 0.5;
  ModelOutput out;
  out.values = d.values.to(torch::kFloat);
  Batch batch = batch_of(d);
  double sum = 0, count = 0, clipped = 0;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 7; ++j) {
      if (at(d.mask, i, j) == 0) continue;
      const double v = static_cast<float>(at(d.values, i, j)), ov = static_cast<float>(at(d.old_values, i, j));
      const double ret = static_cast<float>(at(d.returns, i, j));
      const double vc = std::min(std::max(v, ov - range), ov + range);
      const double l1 = (v - ret) * (v - ret), l2 = (vc - ret) * (vc - ret);
      sum += std::max(l1, l2);
      clipped += l2 > l1 ? 1 : 0;
      count += 1;
    }
  }
  LossContext ctx;
  ctx.global_num_tokens = count;
  LossResult r = value_loss(out, batch, ctx, range);
  EXPECT_NEAR(r.loss.item<double>(), 0.5 * sum / count, 1e-5);
  EXPECT_NEAR(r.metrics.at("vf_clipfrac").item<double>(), clipped / count, 1e-6);
}

TEST(Losses, SelectedByConfigAndNameTheirInputs) {
  LossSection s;
  s.type = "ppo";
  EXPECT_EQ(required_inputs(s), (std::vector<std::string>{"old_log_probs", "advantages"}));
  s.type = "value";
  EXPECT_EQ(required_inputs(s), (std::vector<std::string>{"values", "returns"}));
  Data d = make_data(2, 5);
  ModelOutput out;
  out.values = d.values.to(torch::kFloat);
  LossContext ctx;
  ctx.global_num_tokens = 10;
  EXPECT_NEAR(make_loss(s)(out, batch_of(d), ctx).loss.item<double>(),
              value_loss(out, batch_of(d), ctx, s.cliprange_value).loss.item<double>(), 1e-7);
}

}  // namespace
}  // namespace enginery
