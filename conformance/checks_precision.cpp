// Precision checks (docs/ARCHITECTURE.md, "Precision"): the constructor's defaults, what initialize() sets per param_dtype, that the
// forward really computes in that dtype, and that bad config values are refused with the field named.
#include <gtest/gtest.h>

#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/target.h"
#include "host_api/error.h"
#include "host_api/precision.h"

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
  args.engine.mixed_precision.reset();  // the host's default: bf16 / fp32 / fp32
  auto engine = create_engine(target, args);
  ASSERT_TRUE(engine != nullptr);
  EXPECT_EQ(engine->autocast_dtype(), c10::kBFloat16) << "a constructed engine must report bf16 (docs/ARCHITECTURE.md, Precision)";
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
  return head_of(target, engine.infer_batch(batch, token_mean_loss(target))).to(torch::kCPU);
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

struct BadValue {
  std::string field;                  // what the message must name ...
  std::string alternative;            // ... or this (a message that names the bad value itself)
  std::function<void(EngineArgs&)> set;
};

void check_bad_config(const Target& target) {
  const std::string option_field = "engine." + target.key.backend + ".no_such_option";
  auto precision = [](std::string MixedPrecisionConfig::*field, std::string value) {
    return [field, value](EngineArgs& args) {
      MixedPrecisionConfig mp = args.engine.mixed_precision.value_or(MixedPrecisionConfig{});
      mp.*field = value;
      args.engine.mixed_precision = mp;
    };
  };
  const std::vector<BadValue> cases = {
      {"param_dtype", "unexpected precision: fp8", precision(&MixedPrecisionConfig::param_dtype, "fp8")},
      {"param_dtype", "unexpected precision: BF16", precision(&MixedPrecisionConfig::param_dtype, "BF16")},
      {"reduce_dtype", "unexpected precision: fp8", precision(&MixedPrecisionConfig::reduce_dtype, "fp8")},
      {"buffer_dtype", "unexpected precision: fp8", precision(&MixedPrecisionConfig::buffer_dtype, "fp8")},
      {"grad_scaler.enabled", "sometimes",
       [](EngineArgs& args) { args.engine.grad_scaler.enabled = "sometimes"; }},
      {option_field, option_field, [](EngineArgs& args) { args.engine.backend_options["no_such_option"] = "1"; }},
  };
  for (const BadValue& bad : cases) {
    SCOPED_TRACE("bad " + bad.field);
    EngineSpec spec;
    spec.adjust = bad.set;
    try {
      auto engine = create_engine(target, spec);
      engine->initialize();
      ADD_FAILURE() << "create() + initialize() accepted a bad " << bad.field;
    } catch (const EngineryError& e) {
      const std::string message = e.what();
      EXPECT_TRUE(message.find(bad.field) != std::string::npos || message.find(bad.alternative) != std::string::npos)
          << "the message names neither '" << bad.field << "' nor '" << bad.alternative << "': " << message;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a bad " << bad.field << " threw something other than EngineryError: " << e.what();
    }
  }
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
  checks.push_back({"bad_config_rejected", "bad precision, scaler or backend option values throw naming the field",
                    requires_precisions({"fp32"}), check_bad_config});
}

}  // namespace conformance
}  // namespace enginery
