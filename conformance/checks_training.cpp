// Training-path checks: the loss goes down, outputs follow batch.h's alignment and the global-token-mean loss,
// infer_batch equals the forward_only path, eval mode leaves no trace, gradients accumulate across calls, and a
// non-finite gradient skips the step without touching anything.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/target.h"
#include "host_api/error.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace conformance {
namespace {

constexpr int kTrainSteps = 20;

void check_train_lowers_loss(const Target& target, const std::string& dtype) {
  EngineSpec spec;
  spec.param_dtype = dtype;
  auto engine = make_engine(target, spec);
  const Batch batch = make_batch(target);
  const LossFn loss = token_mean_loss(target);
  std::vector<double> losses;
  for (int step = 0; step < kTrainSteps; ++step) {
    BatchOutput out = train_batch(*engine, batch, loss);
    ASSERT_TRUE(out.loss.defined() && out.grad_norm.defined()) << "step " << step << ": no loss or grad norm";
    const double value = out.loss.item<double>();
    const double norm = out.grad_norm.item<double>();
    ASSERT_TRUE(std::isfinite(value) && std::isfinite(norm))
        << "step " << step << ": loss " << value << ", grad norm " << norm;
    EXPECT_NEAR(out.lr, spec.lr, 1e-12) << "a constant schedule returns the configured lr";
    losses.push_back(value);
  }
  testing::Test::RecordProperty("first_loss", std::to_string(losses.front()));
  testing::Test::RecordProperty("last_loss", std::to_string(losses.back()));
  // Adam at lr 1e-3 on one fixed batch: a working engine fits it; an engine whose step does nothing stays flat.
  EXPECT_LT(losses.back(), 0.9 * losses.front())
      << "loss went from " << losses.front() << " to " << losses.back() << " in " << kTrainSteps << " steps";
  double early = 0, late = 0;
  for (int i = 0; i < 5; ++i) early += losses[i], late += losses[kTrainSteps - 5 + i];
  EXPECT_LT(late, early) << "the last five losses are not below the first five";
}

void check_output_contract(const Target& target) {
  EngineSpec spec;
  spec.micro_batch_size = 1;  // four micro-batches with four different token counts
  auto engine = make_engine(target, spec);
  const Batch batch = make_batch(target);
  BatchOutput out = infer_batch(*engine, batch, token_mean_loss(target));
  torch::Tensor head = head_of(target, out);
  ASSERT_EQ(head.sizes(), batch.at("input_ids").sizes()) << head_name(target) << " must be [batch, seq]";
  ASSERT_EQ(head.scalar_type(), torch::kFloat);
  ASSERT_TRUE(out.loss.defined());
  EXPECT_EQ(out.loss.numel(), 1);
  auto cpu = head.to(torch::kCPU);
  auto real = batch.at("attention_mask").to(torch::kCPU).to(torch::kBool);
  EXPECT_TRUE(torch::isfinite(cpu.masked_select(real)).all().item<bool>()) << "non-finite outputs on real tokens";
  if (!target.value_model()) {
    EXPECT_TRUE((cpu.select(1, 0) == 0).all().item<bool>()) << "log_probs[:, 0] must be 0 (batch.h alignment)";
    EXPECT_TRUE((cpu.masked_select(real) <= 0).all().item<bool>()) << "log-probabilities above 0";
  }
  // The loss is the global token mean, never a mean over micro-batches (docs/ARCHITECTURE.md, "The contract").
  const double expected = reference_mean_loss(target, head, batch);
  EXPECT_NEAR(out.loss.item<double>(), expected, 1e-5 * std::abs(expected))
      << "BatchOutput.loss is not the token mean over the whole batch";
  BatchOutput backward = forward_backward_batch(*engine, batch, token_mean_loss(target), /*forward_only=*/false);
  EXPECT_NEAR(backward.loss.item<double>(), expected, 1e-5 * std::abs(expected)) << "with backward";
  engine->optimizer_zero_grad();
}

void check_infer_equals_forward_only(const Target& target) {
  auto engine = make_engine(target, EngineSpec{});
  const Batch batch = make_batch(target);
  const LossFn loss = token_mean_loss(target);
  BatchOutput inferred = infer_batch(*engine, batch, loss);
  BatchOutput forward_only = forward_backward_batch(*engine, batch, loss, /*forward_only=*/true);
  BatchOutput no_loss = infer_batch(*engine, batch);
  auto reference = head_of(target, forward_only);
  EXPECT_TRUE(torch::equal(head_of(target, inferred), reference))
      << "max diff " << max_abs_diff(head_of(target, inferred), reference);
  EXPECT_TRUE(torch::equal(head_of(target, no_loss), reference)) << "infer_batch without a loss function";
  ASSERT_TRUE(inferred.loss.defined() && forward_only.loss.defined());
  EXPECT_EQ(inferred.loss.item<double>(), forward_only.loss.item<double>());
}

// The log-prob of each row's last token at temperature T, with that token and with another in its place. Only the
// last token differs, so (causal attention) the two share every logit of the position predicting it, and the
// difference of their log-probs is the difference of those two logits divided by T: the check needs no access to
// the logits, and an engine ignoring the temperature fails it.
torch::Tensor last_token_log_prob_gap(const Target& target, BaseEngine& engine, const Batch& with_a,
                                      const Batch& with_b, double t) {
  Batch a = with_a, b = with_b;
  if (t != 1.0) {
    a.set_meta("temperature", t);
    b.set_meta("temperature", t);
  }
  const torch::Tensor last = with_a.at("attention_mask").sum(1) - 1;
  auto at_last = [&](const BatchOutput& out) {
    return head_of(target, out).to(torch::kCPU).to(torch::kDouble).gather(1, last.to(torch::kCPU).unsqueeze(1));
  };
  return at_last(infer_batch(engine, a)) - at_last(infer_batch(engine, b));
}

void check_temperature(const Target& target) {
  auto engine = make_engine(target, EngineSpec{});
  const Batch with_a = make_batch(target);
  Batch with_b = with_a;
  const torch::Tensor last = with_a.at("attention_mask").sum(1, /*keepdim=*/true) - 1;
  torch::Tensor ids = with_a.at("input_ids").clone();
  const torch::Tensor other = ids.gather(1, last) % (kTokenLimit - 1) + 1;  // another id in [1, kTokenLimit)
  with_b.set("input_ids", ids.scatter(1, last, other));
  const torch::Tensor at_1 = last_token_log_prob_gap(target, *engine, with_a, with_b, 1.0);
  ASSERT_GT(at_1.abs().max().item<double>(), 1e-3) << "the two tokens have the same log-prob at temperature 1";
  for (const double t : {0.5, 2.0}) {
    const torch::Tensor at_t = last_token_log_prob_gap(target, *engine, with_a, with_b, t);
    EXPECT_LT((at_t * t - at_1).abs().max().item<double>(), 1e-4)
        << "at temperature " << t << " the log-prob gaps " << at_t << " are not those at 1 (" << at_1 << ") / " << t;
  }
  Batch bad = with_a;
  bad.set_meta("temperature", 0.0);
  try {
    infer_batch(*engine, bad);
    ADD_FAILURE() << "temperature 0 was accepted";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
}

// Hosts hand an optional input only to engines that declared it, and the loop refuses one an engine did not declare
// (docs/ARCHITECTURE.md, "One step"): a batch temperature other than 1 is refused by name before any work, never
// ignored (an engine that ignored it would return log-probs at 1 to a caller training on them as if at T).
void check_temperature_refused(const Target& target) {
  auto engine = make_engine(target, EngineSpec{});
  Batch batch = make_batch(target);
  batch.set_meta("temperature", 0.5);
  try {
    infer_batch(*engine, batch);
    ADD_FAILURE() << "temperature 0.5 was handed to an engine that does not declare 'temperature'";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("capability 'temperature'"), std::string::npos) << e.what();
  }
}

void check_eval_mode(const Target& target) {
  auto engine = make_engine(target, EngineSpec{});
  const Batch batch = make_batch(target);
  const LossFn loss = token_mean_loss(target);
  const ParamList before = read_params(*engine);
  const bool initial = engine->is_training();
  engine->optimizer_zero_grad();
  {
    auto eval = eval_mode(*engine);
    EXPECT_FALSE(engine->is_training());
    {
      auto train = train_mode(*engine);
      EXPECT_TRUE(engine->is_training());
    }
    EXPECT_FALSE(engine->is_training()) << "train_mode()'s guard did not restore eval mode";
    forward_backward_batch(*engine, batch, loss, /*forward_only=*/true);
  }
  EXPECT_EQ(engine->is_training(), initial) << "eval_mode()'s guard did not restore the mode";
  infer_batch(*engine, batch, loss);
  EXPECT_EQ(engine->is_training(), initial) << "infer_batch changed the mode";
  EXPECT_EQ(diff_params(read_params(*engine), before), "") << "a forward-only pass changed parameters";
  // No gradient may be left behind: the norm of what a step would apply is exactly zero.
  torch::Tensor norm = engine->optimizer_step();
  ASSERT_TRUE(norm.defined());
  EXPECT_EQ(norm.item<double>(), 0.0) << "forward-only passes left gradients behind";
}

void check_grad_accumulation(const Target& target) {
  EngineSpec spec;
  spec.lr = 0.0;  // steps only measure the gradient
  auto engine = make_engine(target, spec);
  const Batch batch = make_batch(target);
  const LossFn loss = fixed_normaliser_loss(target, target_tokens(batch));
  auto norm_after = [&](const std::vector<Batch>& calls) {
    engine->optimizer_zero_grad();
    for (const Batch& part : calls) forward_backward_batch(*engine, part, loss, /*forward_only=*/false);
    return engine->optimizer_step().item<double>();
  };
  const double once = norm_after({batch});
  ASSERT_TRUE(std::isfinite(once) && once > 0.0) << "grad norm " << once;
  const double twice = norm_after({batch, batch});
  EXPECT_NEAR(twice, 2.0 * once, 1e-6 * once) << "two calls with the same batch must double the gradient";
  const double halves = norm_after({batch.slice(0, 2), batch.slice(2, batch.size())});
  EXPECT_NEAR(halves, once, 1e-5 * once) << "the two halves of a batch must sum to the whole batch's gradient";
  const double again = norm_after({batch});
  EXPECT_EQ(again, once) << "optimizer_zero_grad() did not clear the accumulated gradient";
}

void check_non_finite(const Target& target, const std::string& dtype) {
  EngineSpec spec;
  spec.param_dtype = dtype;
  auto engine = make_engine(target, spec);
  const Batch batch = make_batch(target);
  const LossFn loss = token_mean_loss(target);
  const ParamList before = read_params(*engine);
  const double initial_scale = engine->grad_scaler() ? engine->grad_scaler()->current_scale() : 0.0;

  BatchOutput poisoned = train_batch(*engine, batch, scaled_loss(loss, std::numeric_limits<double>::quiet_NaN()));
  ASSERT_TRUE(poisoned.grad_norm.defined()) << "train_batch reported no grad norm";
  EXPECT_FALSE(std::isfinite(poisoned.grad_norm.item<double>())) << "a NaN loss gave a finite grad norm";
  EXPECT_EQ(diff_params(read_params(*engine), before), "") << "the skipped step changed parameters";
  if (GradScaler* scaler = engine->grad_scaler()) {
    EXPECT_TRUE(scaler->last_step_skipped());
    EXPECT_EQ(scaler->current_scale(), initial_scale * scaler->backoff_factor()) << "the scale did not back off";
    EXPECT_EQ(scaler->growth_tracker(), 0);
  }

  // The next good step must be the step a fresh engine takes: the skipped one left no optimizer state behind.
  BatchOutput good = train_batch(*engine, batch, loss);
  ASSERT_TRUE(std::isfinite(good.grad_norm.item<double>())) << "the step after a skipped one is not finite";
  const ParamList after = read_params(*engine);
  ASSERT_TRUE(all_finite(after));
  EXPECT_NE(diff_params(after, before), "") << "the good step changed nothing";
  auto fresh = make_engine(target, spec);
  train_batch(*fresh, batch, loss);
  const double tolerance = dtype == "fp32" ? 0.0 : 1e-6;  // a backed-off scale rounds fp16 grads differently
  EXPECT_EQ(diff_params(after, read_params(*fresh), tolerance, tolerance), "")
      << "the step after a skipped one differs from a fresh engine's first step";
}

}  // namespace

void add_training_checks(std::vector<Check>& checks) {
  for (const std::string dtype : {"fp32", "bf16", "fp16"}) {
    checks.push_back({"train_lowers_loss_" + dtype, "20 train_batch steps in " + dtype + " lower a fixed batch's loss",
                      requires_precisions({dtype}),
                      [dtype](const Target& target) { check_train_lowers_loss(target, dtype); }});
  }
  checks.push_back({"output_contract", "outputs are [batch, seq], aligned, and the loss is the global token mean",
                    requires_precisions({"fp32"}), check_output_contract});
  checks.push_back({"infer_equals_forward_only", "infer_batch equals forward_backward_batch(forward_only)",
                    requires_precisions({"fp32"}), check_infer_equals_forward_only});
  checks.push_back({"temperature_scales_logits",
                    "batch metadata temperature T: log-probs are those of logits / T; T <= 0 is refused by name",
                    [](const Target& target) {
                      if (target.value_model()) return std::string("a value model has no log-probs");
                      return requires_precisions({"fp32"}, {"temperature"})(target);
                    },
                    check_temperature});
  checks.push_back({"temperature_refused_when_undeclared",
                    "an engine that does not declare 'temperature' has a batch temperature != 1 refused by name",
                    [](const Target& target) {
                      if (target.has("temperature")) return std::string("the engine declares 'temperature'");
                      return requires_precisions({"fp32"})(target);
                    },
                    check_temperature_refused});
  checks.push_back({"eval_mode_leaves_no_trace", "eval/train guards restore the mode; no grads, no parameter change",
                    requires_precisions({"fp32"}), check_eval_mode});
  checks.push_back({"grad_accumulation", "gradients accumulate across forward_backward_batch calls",
                    requires_precisions({"fp32"}), check_grad_accumulation});
  for (const std::string dtype : {"fp32", "fp16"}) {
    checks.push_back({"non_finite_grad_skips_step_" + dtype,
                      "a NaN loss in " + dtype + ": non-finite norm reported, step skipped, nothing changed",
                      requires_precisions({dtype}),
                      [dtype](const Target& target) { check_non_finite(target, dtype); }});
  }
}

}  // namespace conformance
}  // namespace enginery
