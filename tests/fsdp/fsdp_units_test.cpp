// Single-process checks of the engine's parts against independent references: AdamW vs torch::optim::AdamW, the
// LR schedules vs their closed forms, and both shard layouts (pack -> per-rank shards -> gather -> unpack is the
// identity, and ranks own equal-sized shards).
#include <gtest/gtest.h>

#include <cmath>

#include "plugin/fsdp/adamw.h"
#include "plugin/fsdp/lr_scheduler.h"
#include "plugin/fsdp/shard_layout.h"

namespace enginery {
namespace fsdp {
namespace {

TEST(FsdpAdamW, MatchesTorchAdamW) {
  OptimizerConfig cfg;
  cfg.lr = 3e-2;
  cfg.weight_decay = 0.1;
  cfg.betas[0] = 0.8;
  cfg.betas[1] = 0.95;
  cfg.eps = 1e-6;
  torch::manual_seed(0);
  auto p_ref = torch::randn({37}, torch::kDouble).requires_grad_(true);
  auto p = p_ref.detach().clone();
  auto g = torch::zeros_like(p);
  torch::optim::AdamW ref({p_ref}, torch::optim::AdamWOptions(cfg.lr)
                                       .betas({cfg.betas[0], cfg.betas[1]})
                                       .eps(cfg.eps)
                                       .weight_decay(cfg.weight_decay));
  AdamW mine({p}, {g}, cfg);
  for (int step = 0; step < 6; ++step) {
    auto grad = torch::randn({37}, torch::kDouble);
    p_ref.mutable_grad() = grad.clone();
    g.copy_(grad);
    ref.step();
    mine.step(cfg.lr);
  }
  EXPECT_TRUE(torch::allclose(p, p_ref.detach(), 1e-12, 1e-12)) << (p - p_ref).abs().max();
  EXPECT_EQ(mine.step_count(), 6);
}

TEST(FsdpLrScheduler, ConstantWithWarmup) {
  OptimizerConfig cfg;
  cfg.lr = 0.5;
  cfg.lr_warmup_steps = 4;
  LrScheduler s(cfg);
  for (int64_t step = 0; step < 8; ++step) {
    EXPECT_DOUBLE_EQ(s.lr(), cfg.lr * std::min(1.0, step / 4.0)) << step;
    s.step();
  }
}

TEST(FsdpLrScheduler, WarmupFromRatio) {
  OptimizerConfig cfg;
  cfg.lr_warmup_steps = -1;
  cfg.lr_warmup_steps_ratio = 0.25;
  cfg.total_training_steps = 20;
  EXPECT_EQ(LrScheduler(cfg).warmup_steps(), 5);
}

TEST(FsdpLrScheduler, CosineShape) {
  OptimizerConfig cfg;
  cfg.lr = 1.0;
  cfg.lr_scheduler_type = "cosine";
  cfg.lr_warmup_steps = 2;
  cfg.total_training_steps = 12;
  cfg.min_lr_ratio = 0.1;
  LrScheduler s(cfg);
  EXPECT_DOUBLE_EQ(s.multiplier(0), 0.1);       // warmup starts at the floor
  EXPECT_DOUBLE_EQ(s.multiplier(2), 1.0);       // peak after warmup
  EXPECT_NEAR(s.multiplier(7), 0.55, 1e-12);    // half way: (1 + min) / 2
  EXPECT_NEAR(s.multiplier(12), 0.1, 1e-12);    // the floor at the end
  for (int64_t t = 2; t < 12; ++t) EXPECT_GE(s.multiplier(t), s.multiplier(t + 1));
  cfg.num_cycles = 1.0;  // a full cosine: back to the peak at the end
  EXPECT_NEAR(LrScheduler(cfg).multiplier(12), 1.0, 1e-12);
  cfg.lr_scheduler_type = "linear";
  EXPECT_THROW(LrScheduler{cfg}, std::exception);
}

class LayoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LayoutTest, ShardsReassembleToTheFullParameters) {
  const std::vector<std::vector<int64_t>> shapes{{5, 3}, {7}, {2, 2, 2}, {1, 4}};
  for (int64_t world : {1, 2, 3, 4}) {
    auto layout = ShardLayout::create(layout_for_backend(GetParam()), shapes, world);
    std::vector<torch::Tensor> full;
    int64_t total = 0;
    for (const auto& s : shapes) {
      full.push_back(torch::randn(s));
      total += c10::multiply_integers(s);
    }
    EXPECT_GE(layout->shard_numel() * world, total);
    auto packed = torch::empty({world * layout->shard_numel()});
    layout->pack(full, packed);
    // Every rank's shard is a contiguous segment; gathering them in rank order is the packed buffer itself.
    std::vector<torch::Tensor> shards;
    for (int64_t r = 0; r < world; ++r) shards.push_back(packed.narrow(0, r * layout->shard_numel(), layout->shard_numel()).clone());
    auto back = layout->unpack(torch::cat(shards));
    ASSERT_EQ(back.size(), full.size());
    for (size_t i = 0; i < full.size(); ++i) EXPECT_TRUE(torch::equal(back[i], full[i])) << GetParam() << " w" << world;
    // The padding is zero, so it never contributes to norms or updates.
    double full_sumsq = 0;
    for (auto& f : full) full_sumsq += f.pow(2).sum().item<double>();
    EXPECT_NEAR(packed.pow(2).sum().item<double>(), full_sumsq, 1e-5 * full_sumsq);
  }
}

TEST(PerParamLayout, Dim0Chunks) {
  // fsdp2: rank r holds rows [r*ceil(d0/W), ...) of every parameter.
  auto layout = ShardLayout::create(ShardingLayout::kPerParameter, {{5, 2}}, 2);
  auto full = torch::arange(10, torch::kFloat).view({5, 2});
  auto packed = torch::empty({2 * layout->shard_numel()});
  layout->pack({full}, packed);
  EXPECT_EQ(layout->shard_numel(), 6);
  EXPECT_TRUE(torch::equal(packed.narrow(0, 0, 6), full.narrow(0, 0, 3).reshape(-1)));
  EXPECT_TRUE(torch::equal(packed.narrow(0, 6, 4), full.narrow(0, 3, 2).reshape(-1)));
  EXPECT_EQ(packed.narrow(0, 10, 2).abs().sum().item<float>(), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Strategies, LayoutTest, ::testing::Values("fsdp", "fsdp2"));

}  // namespace
}  // namespace fsdp
}  // namespace enginery
