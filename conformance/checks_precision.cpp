// Precision checks (docs/ARCHITECTURE.md, "Precision"): the constructor's defaults, what initialize() sets per param_dtype, that the
// forward really computes in that dtype, and that bad config values are refused with the field named.
#include <gtest/gtest.h>

#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/target.h"
#include "engine_driver/config_checks.h"
#include "host_api/error.h"
#include "engine_driver/precision.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace conformance {
namespace {

// Spellings of each precision that verl's PrecisionType accepts.
std::vector<std::string> spellings(const std::string& dtype) {
  if (dtype == "fp32") return {"fp32", "float32", "32"};
  if (dtype == "bf16") return {"bf16", "bfloat16"};
  return {"fp16", "float16", "16"};
}

void check_constructed_defaults(const Target& target) {
  EngineArgs args = engine_args(target, EngineSpec{});
  args.engine.mixed_precision = MixedPrecisionConfig{};  // the host's default: bf16 / fp32 / fp32
  auto engine = create_engine(target, args);
  ASSERT_TRUE(engine != nullptr);
  EXPECT_EQ(engine->autocast_dtype(), c10::kBFloat16) << "a constructed engine must report bf16";
  EXPECT_EQ(engine->grad_scaler(), nullptr) << "a constructed engine must have no grad scaler";
}

void check_initialize(const Target& target, const std::string& dtype) {
  for (const std::string& spelling : spellings(dtype)) {
    SCOPED_TRACE("param_dtype = \"" + spelling + "\"");
    EngineSpec spec;
    spec.param_dtype = spelling;
    auto engine = make_engine(target, spec);
    EXPECT_EQ(engine->autocast_dtype(), PrecisionType::to_dtype(dtype));
    GradScaler* scaler = engine->grad_scaler();
    if (dtype != "fp16") {
      EXPECT_EQ(scaler, nullptr) << "only fp16 gets a grad scaler by default";
      continue;
    }
    ASSERT_NE(scaler, nullptr) << "fp16 needs the sharded grad scaler";
    EXPECT_EQ(scaler->current_scale(), 65536.0);
    EXPECT_EQ(scaler->growth_factor(), 2.0);
    EXPECT_EQ(scaler->backoff_factor(), 0.5);
    EXPECT_EQ(scaler->growth_interval(), 400);
    EXPECT_EQ(scaler->growth_tracker(), 0);
    EXPECT_FALSE(scaler->last_step_skipped());
  }
}

// Observed through the output only: log-probs (or values) of one batch under fp32 are reproducible bit for bit,
// while those under `dtype` differ from them by a rounding error of that dtype's size. An engine that ignored
// param_dtype (always bf16, or always fp32) gives a difference of exactly zero and fails here.
struct ForwardBounds {
  double min_diff;
  double max_diff;
};
ForwardBounds bounds_of(const std::string& dtype) {
  // bf16 keeps 8 significant bits, fp16 11: measured max differences on builtin:qwen2-tiny are in README.md.
  return dtype == "bf16" ? ForwardBounds{1e-4, 0.1} : ForwardBounds{1e-6, 0.02};
}

torch::Tensor forward_head(const Target& target, BaseEngine& engine, const Batch& batch) {
  return head_of(target, infer_batch(engine, batch, token_mean_loss(target))).to(torch::kCPU);
}

void check_forward_dtype(const Target& target, const std::string& dtype) {
  const Batch batch = make_batch(target);
  auto mask = batch.at("attention_mask").to(torch::kCPU).to(torch::kDouble);
  mask.select(1, 0).zero_();  // position 0 carries no prediction

  EngineSpec fp32_spec;
  auto reference = make_engine(target, fp32_spec);
  EngineSpec low_spec;
  low_spec.param_dtype = dtype;
  auto low = make_engine(target, low_spec);
  const std::string init_diff = diff_params(read_params(*reference), read_params(*low));
  ASSERT_EQ(init_diff, "") << "two engines built from the same config and seed hold different parameters";

  auto first = forward_head(target, *reference, batch);
  auto second = forward_head(target, *reference, batch);
  ASSERT_EQ(first.scalar_type(), torch::kFloat) << head_name(target) << " must be fp32";
  ASSERT_TRUE(torch::equal(first, second)) << "an fp32 forward is not reproducible: max diff "
                                           << max_abs_diff(first, second, mask);
  auto reduced = forward_head(target, *low, batch);
  ASSERT_EQ(reduced.sizes(), first.sizes());
  ASSERT_TRUE(torch::isfinite(reduced).all().item<bool>()) << dtype << " forward is not finite";
  const double diff = max_abs_diff(reduced, first, mask);
  const ForwardBounds bounds = bounds_of(dtype);
  testing::Test::RecordProperty("max_diff_vs_fp32", std::to_string(diff));
  EXPECT_GT(diff, bounds.min_diff) << "the " << dtype << " forward equals the fp32 one: param_dtype is ignored";
  EXPECT_LT(diff, bounds.max_diff) << "the " << dtype << " forward is further from fp32 than " << dtype
                                   << " rounding explains";

  if (dtype == "fp16" && target.has(target.precision_capability("bf16"))) {
    // fp16 has 3 more mantissa bits than bf16: an engine that quietly ran fp16 as bf16 lands exactly on bf16.
    low_spec.param_dtype = "bf16";
    auto bf16 = make_engine(target, low_spec);
    const double bf16_diff = max_abs_diff(forward_head(target, *bf16, batch), first, mask);
    EXPECT_LT(diff, bf16_diff) << "fp16 is no closer to fp32 than bf16";
  }
}

// The support the plugin registered for this engine (host_api/config_support.h).
ConfigSupport declared_support(const Target& target) {
  for (const auto& info : target.registry->list()) {
    if (info.key == target.key) return info.support;
  }
  throw EngineryError("no registration for " + target.key.str(), "conformance");
}

// Every knob the engine does not declare is refused by registry.create(), naming the key, before the factory
// runs; every knob it does declare is accepted there. Never accepted and ignored.
void check_undeclared_config_refused(const Target& target) {
  const ConfigSupport support = declared_support(target);
  int refused = 0;
  for (const ConfigKnob& knob : config_knobs()) {
    SCOPED_TRACE(knob.key);
    EngineArgs args = engine_args(target, EngineSpec{});
    if (!knob.set_unsupported(support, args)) continue;  // the engine implements every value of this knob
    ++refused;
    const std::string key = knob.key == "engine.<backend>" ? "engine." + target.key.backend + ".no_such_option"
                                                           : knob.key;
    try {
      create_engine(target, args);
      ADD_FAILURE() << "registry.create() accepted " << key << " beyond what the engine declares";
    } catch (const EngineryError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("(allowed: "), std::string::npos) << e.what();
    }
  }
  testing::Test::RecordProperty("knobs_refused", std::to_string(refused));
}

}  // namespace

void add_precision_checks(std::vector<Check>& checks) {
  checks.push_back({"constructed_defaults", "a constructed, not initialized engine reports bf16 and no scaler",
                    [](const Target&) { return std::string(); }, check_constructed_defaults});
  for (const std::string dtype : {"fp32", "bf16", "fp16"}) {
    checks.push_back({"initialize_" + dtype,
                      "initialize() with param_dtype " + dtype + " (every spelling) sets autocast dtype and scaler",
                      requires_precisions({dtype}),
                      [dtype](const Target& target) { check_initialize(target, dtype); }});
  }
  for (const std::string dtype : {"bf16", "fp16"}) {
    checks.push_back({"forward_computes_in_" + dtype,
                      "the forward under " + dtype + " differs from fp32 by " + dtype + " rounding, fp32 is exact",
                      requires_precisions({"fp32", dtype}),
                      [dtype](const Target& target) { check_forward_dtype(target, dtype); }});
  }
  checks.push_back({"undeclared_config_refused",
                     "each configuration knob the engine does not declare is refused by name at registry.create()",
                     requires_precisions({"fp32"}), check_undeclared_config_refused});
}

}  // namespace conformance
}  // namespace enginery
