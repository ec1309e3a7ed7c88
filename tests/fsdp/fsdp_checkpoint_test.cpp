// Same-world-size sharded checkpoints: save -> load into a fresh engine -> the next step is identical.
#include <gtest/gtest.h>

#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"

namespace enginery {
namespace fsdp_test {
namespace {

TEST(FsdpCheckpoint, SaveLoadGivesTheIdenticalNextStep) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.grad_scaler.enabled = "always";  // scaler state travels too
    args.engine.grad_scaler.growth_interval = 2;
    args.optim.lr_scheduler_type = "cosine";
    args.optim.lr_warmup_steps = 2;
    const std::string dir = ctx.shared_dir + "/global_step_2";

    fsdp::FSDPEngine first(args, tiny_builder(TinyConfig{}));
    first.initialize();
    for (int step = 0; step < 3; ++step) first.train_batch(rank_slice(make_batch(4, 8, 64, 200 + step), ctx.rank, 2), sft_loss);
    first.save_checkpoint(dir, 3, 0);
    const double scale_at_save = first.grad_scaler()->current_scale();
    Batch next = rank_slice(make_batch(4, 8, 64, 300), ctx.rank, 2);
    auto a = first.train_batch(next, sft_loss);
    auto params_a = engine_params(first);

    auto args_b = args;
    args_b.engine.seed = 1234;  // different initial weights: everything must come from the checkpoint
    fsdp::FSDPEngine second(args_b, tiny_builder(TinyConfig{}));
    second.initialize();
    second.load_checkpoint(dir);
    EXPECT_EQ(second.grad_scaler()->current_scale(), scale_at_save);
    auto b = second.train_batch(next, sft_loss);
    EXPECT_EQ(a.lr, b.lr);
    EXPECT_TRUE(torch::equal(a.grad_norm, b.grad_norm));
    EXPECT_EQ(first.grad_scaler()->current_scale(), second.grad_scaler()->current_scale());
    EXPECT_EQ(first.optimizer()->step_count(), second.optimizer()->step_count());
    auto params_b = engine_params(second);
    for (const auto& [name, t] : params_a) EXPECT_TRUE(torch::equal(t, params_b.at(name))) << name;
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
