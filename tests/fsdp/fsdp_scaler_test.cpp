// The sharded grad scaler over real Gloo ranks: an inf on one rank makes every rank skip and back off, clean steps
// grow the scale after growth_interval, and a scaled fp32 run trains exactly like an unscaled one.
#include <gtest/gtest.h>

#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

EngineArgs scaled_args(const testing::RankContext& ctx, const std::string& strategy, double init_scale,
                       int64_t growth_interval) {
  auto args = make_args(strategy, "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
  args.engine.grad_scaler.enabled = ScalerMode::kAlways;
  args.engine.grad_scaler.init_scale = init_scale;
  args.engine.grad_scaler.growth_interval = growth_interval;
  return args;
}

std::vector<torch::Tensor> optimizer_state(fsdp::FSDPEngine& e) {
  std::vector<torch::Tensor> s;
  for (auto& t : e.optimizer()->exp_avg()) s.push_back(t.clone());
  for (auto& t : e.optimizer()->exp_avg_sq()) s.push_back(t.clone());
  for (auto& t : e.optimizer()->params()) s.push_back(t.clone());
  return s;
}

TEST(FsdpScaler, InfOnOneRankSkipsEveryRankAndBacksOff) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    fsdp::FSDPEngine engine(scaled_args(ctx, "fsdp2", 1024.0, 100), tiny_builder(TinyConfig{}));
    engine.initialize();
    auto* scaler = engine.sharded_grad_scaler();
    ASSERT_NE(scaler, nullptr);
    Batch global = make_batch(4, 8, 64, 7);
    // One clean step so the optimizer state is not trivially zero.
    train_batch(engine, rank_slice(global, ctx.rank, 2), sft_loss);
    EXPECT_FALSE(scaler->last_step_skipped());
    const double scale_before = scaler->current_scale();
    const auto state_before = optimizer_state(engine);
    const int64_t steps_before = engine.optimizer()->step_count();

    engine.optimizer_zero_grad();
    forward_backward_batch(engine, rank_slice(global, ctx.rank, 2), sft_loss, false);
    if (ctx.rank == 1) engine.fsdp_module()->units()[1].shard_grad()[0] = std::numeric_limits<float>::infinity();
    auto norm = engine.optimizer_step();

    EXPECT_FALSE(std::isfinite(norm.item<double>()));
    EXPECT_TRUE(scaler->last_step_skipped()) << "rank " << ctx.rank << " did not skip";
    EXPECT_EQ(scaler->current_scale(), scale_before * 0.5);
    EXPECT_EQ(scaler->growth_tracker(), 0);
    EXPECT_EQ(engine.optimizer()->step_count(), steps_before);
    const auto state_after = optimizer_state(engine);
    for (size_t i = 0; i < state_before.size(); ++i) EXPECT_TRUE(torch::equal(state_before[i], state_after[i])) << i;
  });
}

TEST(FsdpScaler, ScaleGrowsAfterGrowthIntervalCleanSteps) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    const int64_t interval = 3;
    fsdp::FSDPEngine engine(scaled_args(ctx, "fsdp", 64.0, interval), tiny_builder(TinyConfig{}));
    engine.initialize();
    auto* scaler = engine.sharded_grad_scaler();
    for (int64_t step = 1; step <= interval; ++step) {
      train_batch(engine, rank_slice(make_batch(4, 8, 64, 20 + step), ctx.rank, 2), sft_loss);
      EXPECT_FALSE(scaler->last_step_skipped());
      if (step < interval) {
        EXPECT_EQ(scaler->current_scale(), 64.0) << "step " << step;
        EXPECT_EQ(scaler->growth_tracker(), step);
      }
    }
    EXPECT_EQ(scaler->current_scale(), 128.0);
    EXPECT_EQ(scaler->growth_tracker(), 0);
  });
}

TEST(FsdpScaler, ScaledFp32RunEqualsUnscaledRun) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    fsdp::FSDPEngine scaled(scaled_args(ctx, "fsdp2", 4096.0, 1000), tiny_builder(TinyConfig{}));
    scaled.initialize();
    auto plain_args = make_args("fsdp2", "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
    fsdp::FSDPEngine plain(plain_args, tiny_builder(TinyConfig{}));
    plain.initialize();
    ASSERT_EQ(plain.grad_scaler(), nullptr);
    Reference ref(TinyConfig{}, plain_args);
    for (int step = 0; step < 3; ++step) {
      Batch global = make_batch(4, 8, 64, 40 + step);
      auto a = train_batch(scaled, rank_slice(global, ctx.rank, 2), sft_loss);
      auto b = train_batch(plain, rank_slice(global, ctx.rank, 2), sft_loss);
      EXPECT_NEAR(a.grad_norm.item<double>(), b.grad_norm.item<double>(), 1e-5 * b.grad_norm.item<double>());
      ref.accumulate(global, sft_loss);
      ref.step();
    }
    // Scaling by a power of two is exact in fp32, so the runs agree to rounding of the unscale only.
    auto pa = engine_params(scaled), pb = engine_params(plain);
    for (const auto& [name, t] : pb) {
      EXPECT_LE((pa.at(name) - t).abs().max().item<double>(), 1e-6) << name;
    }
    expect_params_near(pa, *ref.model(), 2e-5, "scaled run vs reference");
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
