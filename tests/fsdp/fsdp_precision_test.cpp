// The regression of the original bug (an engine hard-coded bf16 autocast and left fp16 without loss scaling):
// the engine's autocast dtype and grad scaler follow mixed_precision.param_dtype for both strategies, and the
// forward really computes in that dtype.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "engine_driver/precision.h"
#include "support/torch_compat.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

TinyConfig tiny() { return TinyConfig{}; }

class PrecisionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PrecisionTest, AutocastDtypeAndScalerFollowParamDtype) {
  const std::string strategy = GetParam();
  struct Case {
    std::string param_dtype;
    c10::ScalarType expected;
    bool scaler;
  };
  for (const Case& c : {Case{"bf16", c10::kBFloat16, false}, Case{"fp32", c10::kFloat, false},
                        Case{"fp16", c10::kHalf, true}}) {
    SCOPED_TRACE(strategy + " param_dtype=" + c.param_dtype);
    fsdp::FSDPEngine engine(make_args(strategy, c.param_dtype), tiny_builder(tiny()));
    if (!compat::autocast_supported(c10::DeviceType::CPU, c.expected)) {
      // This build cannot compute in the dtype on CPU: initialize() must say so, never fall back.
      try {
        engine.initialize();
        ADD_FAILURE() << "initialize() accepted " << c.param_dtype << " on a CPU that cannot compute in it";
      } catch (const EngineryError& e) {
        EXPECT_NE(std::string(e.what()).find("cannot compute in fp16 on cpu"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("engine.mixed_precision.param_dtype"), std::string::npos) << e.what();
      }
      // What build_fsdp_module resolved before the check still tells the truth.
      EXPECT_EQ(engine.autocast_dtype(), c.expected);
      EXPECT_EQ(engine.grad_scaler() != nullptr, c.scaler);
      continue;
    }
    engine.initialize();
    EXPECT_EQ(engine.autocast_dtype(), c.expected);
    EXPECT_EQ(engine.grad_scaler() != nullptr, c.scaler);
    if (c.scaler) {
      EXPECT_EQ(engine.grad_scaler()->growth_interval(), 400);
      EXPECT_EQ(engine.grad_scaler()->current_scale(), 65536.0);
    }
  }
}

TEST_P(PrecisionTest, DefaultMixedPrecisionMeansBf16WithoutScaler) {
  auto args = make_args(GetParam(), "fp32");
  args.engine.mixed_precision = MixedPrecisionConfig{};
  fsdp::FSDPEngine engine(args, tiny_builder(tiny()));
  engine.initialize();
  EXPECT_EQ(engine.autocast_dtype(), c10::kBFloat16);
  EXPECT_EQ(engine.param_dtype(), c10::kBFloat16);
  EXPECT_EQ(engine.reduce_dtype(), c10::kFloat);
  EXPECT_EQ(engine.grad_scaler(), nullptr);
}

TEST_P(PrecisionTest, ScalerSettingsAreConfigurable) {
  auto args = make_args(GetParam(), "fp32");
  args.engine.grad_scaler.enabled = ScalerMode::kAlways;
  args.engine.grad_scaler.growth_interval = 7;
  args.engine.grad_scaler.init_scale = 8.0;
  args.engine.grad_scaler.backoff_factor = 0.25;
  fsdp::FSDPEngine engine(args, tiny_builder(tiny()));
  engine.initialize();
  ASSERT_NE(engine.grad_scaler(), nullptr);
  EXPECT_EQ(engine.grad_scaler()->growth_interval(), 7);
  EXPECT_EQ(engine.grad_scaler()->current_scale(), 8.0);
  EXPECT_EQ(engine.grad_scaler()->backoff_factor(), 0.25);
  EXPECT_EQ(engine.autocast_dtype(), c10::kFloat);
}

// The matmul outputs inside the forward carry the compute dtype: bf16 under bf16 autocast, fp32 with none.
TEST_P(PrecisionTest, ForwardComputesInTheDtype) {
  for (const std::string dtype : {"bf16", "fp32"}) {
    SCOPED_TRACE(GetParam() + " " + dtype);
    std::shared_ptr<TinyDecoder> model;
    fsdp::FSDPEngine engine(make_args(GetParam(), dtype), tiny_builder(tiny(), &model));
    engine.initialize();
    std::vector<c10::ScalarType> seen;
    model->probe = [&](size_t unit, const torch::Tensor& t) {
      if (unit > 0) seen.push_back(t.scalar_type());
    };
    Batch b = make_batch(2, 8, 64, 1);  // one micro-batch of two rows
    const torch::Tensor loss = forward_backward_batch(engine, b, sft_loss, /*forward_only=*/false).loss;
    const auto expected = PrecisionType::to_dtype(dtype);
    ASSERT_EQ(seen.size(), 3u);  // two layers and the head
    for (auto s : seen) EXPECT_EQ(s, expected);
    // Autocast is off again after the forward, and the loss is finite.
    EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, PrecisionTest, ::testing::Values("fsdp", "fsdp2"));

// A subclass, to reach the base's one precision setter (set_precision is protected).
class OwnPathEngine : public fsdp::FSDPEngine {
 public:
  using FSDPEngine::FSDPEngine;
  // What a subclass may do to the precision: only through the base's one setter.
  void try_precision(c10::ScalarType dtype, bool with_scaler, ScalerMode configured) {
    std::unique_ptr<GradScaler> scaler;
    if (with_scaler) scaler = std::make_unique<fsdp::ShardedGradScaler>(GradScalerConfig{}, torch::kCPU);
    set_precision(Precision{dtype, c10::kFloat, c10::kFloat}, std::move(scaler), configured);
  }
};

// Every FSDPEngine trains sharded units: an override of shard_model() that builds no FsdpModule (neither through
// build_fsdp_module nor its own, as VeOmni's) is refused by initialize(), by name, before the optimizer is built.
class NoModuleEngine : public fsdp::FSDPEngine {
 public:
  using FSDPEngine::FSDPEngine;

 protected:
  void shard_model() override {}
};

TEST(PrecisionSubclass, ShardModelThatBuildsNoModuleIsRefused) {
  NoModuleEngine engine(make_args("fsdp2", "bf16"), tiny_builder(tiny()));
  try {
    engine.initialize();
    ADD_FAILURE() << "an engine without FSDP units initialized";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("shard_model() built no FSDP module"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.fsdp_module(), nullptr);
  EXPECT_EQ(engine.optimizer(), nullptr);
}

// The rule of host_api 2.0: fp16 never runs without a scaler unless the user said "never"; the refusal leaves the
// engine as it was.
TEST(PrecisionSubclass, Fp16WithoutScalerIsRefusedUnlessNever) {
  OwnPathEngine engine(make_args("fsdp2", "fp32"), tiny_builder(tiny()));
  for (ScalerMode mode : {ScalerMode::kAuto, ScalerMode::kAlways}) {
    try {
      engine.try_precision(c10::kHalf, /*with_scaler=*/false, mode);
      ADD_FAILURE() << "fp16 without a scaler accepted under grad_scaler.enabled = " << to_string(mode);
    } catch (const EngineryError& e) {
      EXPECT_NE(std::string(e.what()).find("fp16 compute needs a grad scaler"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("engine.grad_scaler.enabled = \"never\""), std::string::npos);
    }
    EXPECT_EQ(engine.autocast_dtype(), c10::kBFloat16);
    EXPECT_EQ(engine.grad_scaler(), nullptr);
  }
  engine.try_precision(c10::kHalf, /*with_scaler=*/true, ScalerMode::kAuto);
  EXPECT_EQ(engine.autocast_dtype(), c10::kHalf);
  EXPECT_NE(engine.grad_scaler(), nullptr);
  engine.try_precision(c10::kHalf, /*with_scaler=*/false, ScalerMode::kNever);  // the user's explicit choice
  EXPECT_EQ(engine.autocast_dtype(), c10::kHalf);
  EXPECT_EQ(engine.grad_scaler(), nullptr);
  EXPECT_THROW(engine.try_precision(c10::kFloat, /*with_scaler=*/true, ScalerMode::kNever), EngineryError);
}

TEST(PrecisionDefaults, BaseConstructorSetsBf16AndNoScaler) {
  fsdp::FSDPEngine engine(make_args("fsdp", "fp16"), tiny_builder(tiny()));
  EXPECT_EQ(engine.autocast_dtype(), c10::kBFloat16);
  EXPECT_EQ(engine.grad_scaler(), nullptr);
}

// [engine.<backend>] fp8: refused by name, before any work, wherever FP8 GEMMs cannot run (this CPU engine), and an unknown value lists the allowed ones. "off" is the default.
TEST(PrecisionFp8, RefusedByNameWhereItCannotRun) {
  auto message = [](const std::string& value) {
    auto args = make_args("fsdp2", "bf16");
    args.engine.backend_options["fp8"] = std::string(value);
    try {
      fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    } catch (const EngineryError& e) {
      EXPECT_EQ(e.where(), "engine.fsdp2.fp8");
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message("off"), "");
  EXPECT_NE(message("rowwise").find("(allowed: off, tensorwise, delayed)"), std::string::npos);
  const std::string why = "compute capability 8.9 or later; this engine runs on cpu";
  for (const char* recipe : {"tensorwise", "delayed"}) {
    const std::string cpu = message(recipe);
    EXPECT_NE(cpu.find(why), std::string::npos) << cpu;
  }
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
