// VeOmniEngine on one rank: what each setting does to the autocast dtype, the scaler and the weights; bad settings;
// training through the inherited forward_step.
#include <gtest/gtest.h>

#include "engine_driver/config_checks.h"
#include "engine_driver/mode_offload.h"
#include "host_api/error.h"
#include "plugin/veomni/veomni_engine.h"
#include "tests/veomni/veomni_test_util.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace {

using veomni::VeOmniEngine;
using veomni_test::make_args;

const std::vector<std::map<std::string, ScalarValue>> kAllSettings = {
    {},
    {{"enable_full_shard", true}, {"mixed_precision", true}},
    {{"enable_full_shard", false}, {"mixed_precision", true}},
    {{"enable_full_shard", true}, {"mixed_precision", false}},
    {{"enable_full_shard", false}, {"mixed_precision", false}},
};

TEST(VeOmniSettings, ConstructedEngineReportsBf16AndNoScaler) {
  for (const auto& options : kAllSettings) {
    VeOmniEngine engine(make_args(options));
    EXPECT_EQ(engine.autocast_dtype(), c10::kBFloat16);
    EXPECT_EQ(engine.grad_scaler(), nullptr);
  }
}

TEST(VeOmniSettings, EachSettingsAutocastDtypeAndScaler) {
  struct Case {
    std::map<std::string, ScalarValue> options;
    std::string param_dtype;
    c10::ScalarType autocast;
    c10::ScalarType param;  // the dtype full parameters are gathered in
  };
  const std::vector<Case> cases = {
      {{}, "", c10::kBFloat16, c10::kBFloat16},
      {{{"mixed_precision", true}}, "fp32", c10::kFloat, c10::kFloat},
      {{{"mixed_precision", true}, {"enable_full_shard", false}}, "bf16", c10::kBFloat16, c10::kBFloat16},
      {{{"mixed_precision", false}}, "", c10::kBFloat16, c10::kBFloat16},
      {{{"mixed_precision", false}, {"enable_full_shard", false}}, "bf16", c10::kBFloat16, c10::kBFloat16},
  };
  for (const auto& c : cases) {
    VeOmniEngine engine(make_args(c.options, c.param_dtype));
    engine.initialize();
    EXPECT_EQ(engine.autocast_dtype(), c.autocast);
    EXPECT_EQ(engine.grad_scaler(), nullptr);
    EXPECT_EQ(engine.param_dtype(), c.param);
    ASSERT_NE(engine.fsdp_module(), nullptr);
    EXPECT_EQ(engine.fsdp_module()->options().layout, fsdp::ShardingLayout::kPerParameter);
    const bool full_shard = !c.options.count("enable_full_shard") || std::get<bool>(c.options.at("enable_full_shard"));
    EXPECT_EQ(engine.fsdp_module()->options().reshard_after_forward, full_shard);
  }
}

TEST(VeOmniSettings, MixedPrecisionFalseKeepsBf16Weights) {
  auto batch = veomni_test::make_batch(4, 16, 3);
  for (const bool mp : {false, true}) {
    VeOmniEngine engine(make_args({{"mixed_precision", mp}}));
    engine.initialize();
    for (int step = 0; step < 2; ++step) train_batch(engine, batch, veomni_test::sft_loss);
    bool all_bf16 = true;
    for (auto& u : engine.fsdp_module()->units()) {
      const auto& s = u.shard();
      all_bf16 = all_bf16 && torch::equal(s, s.to(torch::kBFloat16).to(torch::kFloat));
    }
    // fp32 masters leave bf16's grid after an AdamW step with lr 1e-2; bf16 weights never do.
    EXPECT_EQ(all_bf16, !mp) << "mixed_precision=" << mp;
  }
}

TEST(VeOmniSettings, BadSettingsAreRejectedNamingTheField) {
  struct Bad {
    std::function<void(EngineArgs&)> set;
    std::string field, allowed;
  };
  const std::vector<Bad> cases = {
      {[](EngineArgs& a) { a.engine.backend_options["no_such_option"] = int64_t{1}; }, "engine.veomni.no_such_option",
       "enable_full_shard, mixed_precision"},
      {[](EngineArgs& a) { a.engine.backend_options["enable_full_shard"] = std::string("yes"); },
       "engine.veomni.enable_full_shard", "true, false"},
      {[](EngineArgs& a) { a.engine.backend_options["mixed_precision"] = int64_t{1}; }, "engine.veomni.mixed_precision",
       "true, false"},
      {[](EngineArgs& a) { a.engine.mixed_precision.param_dtype = c10::kHalf; }, "engine.mixed_precision.param_dtype",
       "(allowed: fp32, bf16)"},
      {[](EngineArgs& a) {
         a.engine.backend_options["mixed_precision"] = false;
         a.engine.mixed_precision.param_dtype = c10::kFloat;
       },
       "engine.mixed_precision.param_dtype", "engine.veomni.mixed_precision"},
      {[](EngineArgs& a) { a.engine.grad_scaler.enabled = ScalerMode::kAlways; }, "engine.grad_scaler.enabled",
       "auto, never"},
      // A shard group smaller than the world is HSDP; at the world's size or more it is the whole world (verl's reading).
      {[](EngineArgs& a) {
         a.world_size = 2;
         a.engine.fsdp_size = 1;
       },
       "engine.fsdp_size", "no HSDP"},
      {[](EngineArgs& a) { a.engine.reshard_after_forward = false; }, "engine.reshard_after_forward", "true"},
  };
  for (const auto& bad : cases) {
    auto args = make_args({});
    bad.set(args);
    try {
      // What the registry does before the factory runs, then the factory's own checks.
      check_config_supported(VeOmniEngine::config_support("cpu"), args, "veomni");
      VeOmniEngine engine(args);
      ADD_FAILURE() << "accepted a bad " << bad.field;
    } catch (const EngineryError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(bad.field), std::string::npos) << what;
      EXPECT_NE(what.find(bad.allowed), std::string::npos) << what;
    }
  }
}

// Every key VeOmni declares to the registry (the registry refuses the rest) is one its constructor takes: the
// inherited FSDPEngine options included, gradient_checkpointing_policy among them.
TEST(VeOmniSettings, EveryDeclaredOptionIsTaken) {
  const std::map<std::string, ScalarValue> values = {
      {"enable_full_shard", true},       {"mixed_precision", true}, {fsdp::kOffloadStep, std::string("device")},
      {kOffloadOutsideModes, false},     {fsdp::kFp8, std::string("off")},
      {fsdp::kCheckpointingPolicy, std::string("mlp")}};
  const auto declared = VeOmniEngine::config_support("cpu").backend_options;
  ASSERT_EQ(declared.size(), values.size());
  for (const std::string& key : declared) {
    ASSERT_TRUE(values.count(key)) << key;
    auto args = make_args({{key, values.at(key)}});
    args.model.enable_gradient_checkpointing = true;
    check_config_supported(VeOmniEngine::config_support("cpu"), args, "veomni");
    EXPECT_NO_THROW(VeOmniEngine engine(args)) << key;
  }
}

TEST(VeOmniTraining, TrainingLowersLossAndForwardStepIsInherited) {
  VeOmniEngine engine(make_args({}));
  engine.initialize();
  EXPECT_TRUE(engine.built_full_weights()) << "rank 0 builds the model";
  auto batch = veomni_test::make_batch(4, 16, 5);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 10; ++step) {
    auto out = train_batch(engine, batch, veomni_test::sft_loss);
    ASSERT_TRUE(std::isfinite(out.grad_norm.item<double>()));
    (step == 0 ? first : last) = out.loss.item<double>();
  }
  EXPECT_LT(last, 0.9 * first);

  // forward_step is FSDPEngine's: it gathers through the module veomni built and reshards after a no-grad pass.
  torch::NoGradGuard no_grad;
  const BatchOutput out = forward_backward_batch(engine, batch, veomni_test::sft_loss, /*forward_only=*/true);
  ASSERT_TRUE(out.outputs.count("log_probs"));
  EXPECT_EQ(out.outputs.at("log_probs").sizes(), (std::vector<int64_t>{4, 16}));
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  for (auto& u : engine.fsdp_module()->units()) EXPECT_EQ(u.state(), fsdp::FsdpUnit::State::kSharded) << u.name();
}

TEST(VeOmniTraining, FullShardOffEqualsFullShardOnInFp32) {
  // Only the gather schedule differs: the math, and so every parameter, must be bitwise the same.
  auto batch = veomni_test::make_batch(4, 16, 7);
  std::map<std::string, torch::Tensor> params[2];
  for (int i = 0; i < 2; ++i) {
    VeOmniEngine engine(make_args({{"enable_full_shard", i == 0}}, "fp32"));
    engine.initialize();
    for (int step = 0; step < 3; ++step) train_batch(engine, batch, veomni_test::sft_loss);
    params[i] = veomni_test::params_of(engine);
  }
  EXPECT_EQ(veomni_test::max_diff(params[0], params[1]), 0.0);
}

}  // namespace
}  // namespace enginery
