// Checkpoints read at another world size, fsdp_size or strategy: the loaded parameters and AdamW moments are
// bitwise those saved (gathered independently of the checkpoint code), and the next step matches the run that
// continued without a checkpoint (within fp32 reduction-order noise: the new sharding sums in another order).
#include <gtest/gtest.h>


#include "plugin/fsdp/shard_layout.h"
#include "tests/fsdp/checkpoint_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

constexpr double kNextStepTol = 2e-6;

EngineArgs base_args(const std::string& strategy, int rank, int world, c10::intrusive_ptr<compat::CommGroup> group,
                     c10::intrusive_ptr<c10d::Store> store) {
  auto args = make_args(strategy, "fp32", rank, world, std::move(group), std::move(store));
  args.engine.grad_scaler.enabled = ScalerMode::kAlways;
  args.optim.lr_scheduler_type = "cosine";
  args.optim.lr_warmup_steps = 1;
  return args;
}

const TinyConfig kModel{64, 12, 2};  // hidden 12: dim-0 chunks and the flat split do not fall on row boundaries

Batch slice_for(const Batch& global, int rank, int world) { return rank_slice(global, rank, world); }

// The ranges each layout reports are exactly where pack() puts every element: checked by packing each
// parameter's element index.
TEST(FsdpCheckpointReshard, OwnedRangesAgreeWithPack) {
  const std::vector<std::vector<int64_t>> shapes = {{5, 3}, {7}, {2, 2, 3}, {1}};
  for (const std::string strategy : {"fsdp", "fsdp2"}) {
    for (int64_t world : {1, 2, 3, 4}) {
      auto layout = fsdp::ShardLayout::create(fsdp::layout_for_backend(strategy), shapes, world);
      std::vector<torch::Tensor> full;
      for (size_t i = 0; i < shapes.size(); ++i) {
        const int64_t n = c10::multiply_integers(shapes[i]);
        full.push_back((torch::arange(n, torch::kDouble) + 1000.0 * static_cast<double>(i + 1)).view(shapes[i]));
      }
      auto packed = torch::empty({world * layout->shard_numel()}, torch::kDouble);
      layout->pack(full, packed);
      int64_t covered = 0;
      for (int64_t r = 0; r < world; ++r) {
        auto shard = packed.narrow(0, r * layout->shard_numel(), layout->shard_numel());
        auto expected = torch::zeros_like(shard);
        for (const auto& range : layout->owned_ranges(r)) {
          expected.narrow(0, range.shard_offset, range.end - range.begin)
              .copy_(full[range.param].reshape(-1).narrow(0, range.begin, range.end - range.begin));
          covered += range.end - range.begin;
        }
        EXPECT_TRUE(torch::equal(shard, expected)) << strategy << " world " << world << " rank " << r;
      }
      EXPECT_EQ(covered, 5 * 3 + 7 + 12 + 1) << strategy << " world " << world;
    }
  }
}

// 2 ranks (fsdp) -> 1 rank, and 2 ranks fsdp -> 2 ranks fsdp2.
TEST(FsdpCheckpointReshard, TwoRanksToOneAndAcrossStrategies) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    const std::string dir = ctx.shared_dir + "/global_step_2";
    Batch next = make_batch(4, 8, 64, 99);
    fsdp::FSDPEngine saver(base_args("fsdp", ctx.rank, 2, ctx.group, ctx.store), tiny_builder(kModel));
    saver.initialize();
    for (int s = 0; s < 2; ++s) train_batch(saver, slice_for(make_batch(4, 8, 64, 10 + s), ctx.rank, 2), sft_loss);
    saver.save_checkpoint(dir, 2, 0);
    const auto saved = full_state(saver);
    train_batch(saver, slice_for(next, ctx.rank, 2), sft_loss);
    const auto continued = full_state(saver);

    auto other = base_args("fsdp2", ctx.rank, 2, ctx.group, ctx.store);
    other.engine.seed = 5;
    fsdp::FSDPEngine fsdp2(other, tiny_builder(kModel));
    fsdp2.initialize();
    fsdp2.load_checkpoint(dir);
    expect_bitwise_equal(full_state(fsdp2), saved, "fsdp (2 ranks) -> fsdp2 (2 ranks)");
    train_batch(fsdp2, slice_for(next, ctx.rank, 2), sft_loss);
    expect_near(full_state(fsdp2), continued, kNextStepTol, "next step after fsdp -> fsdp2");

    if (ctx.rank == 0) {
      auto single = base_args("fsdp", 0, 1, {}, {});
      single.engine.seed = 6;
      fsdp::FSDPEngine one(single, tiny_builder(kModel));
      one.initialize();
      one.load_checkpoint(dir);
      expect_bitwise_equal(full_state(one), saved, "2 ranks -> 1 rank");
      train_batch(one, next, sft_loss);
      expect_near(full_state(one), continued, kNextStepTol, "next step after 2 -> 1 ranks");
    }
  });
}

// 1 rank (fsdp2) -> 4 ranks (fsdp), and 4 ranks HSDP (fsdp_size 2) -> 4 ranks plain and -> 2 ranks.
TEST(FsdpCheckpointReshard, OneRankToFourAndFsdpSize) {
  testing::run_ranks(4, [](const testing::RankContext& ctx) {
    const std::string one_dir = ctx.shared_dir + "/from_one", hsdp_dir = ctx.shared_dir + "/from_hsdp";
    Batch next = make_batch(4, 8, 64, 77);
    std::unique_ptr<fsdp::FSDPEngine> single;
    TensorMap saved_single, continued_single;
    if (ctx.rank == 0) {
      single = std::make_unique<fsdp::FSDPEngine>(base_args("fsdp2", 0, 1, {}, {}), tiny_builder(kModel));
      single->initialize();
      for (int s = 0; s < 2; ++s) train_batch(*single, make_batch(4, 8, 64, 20 + s), sft_loss);
      single->save_checkpoint(one_dir, 2, 0);
      saved_single = full_state(*single);
      train_batch(*single, next, sft_loss);
      continued_single = full_state(*single);
    }
    ctx.group->barrier()->wait();

    auto four_args = base_args("fsdp", ctx.rank, 4, ctx.group, ctx.store);
    four_args.engine.seed = 8;
    fsdp::FSDPEngine four(four_args, tiny_builder(kModel));
    four.initialize();
    four.load_checkpoint(one_dir);
    const auto loaded_four = full_state(four);
    if (ctx.rank == 0) expect_bitwise_equal(loaded_four, saved_single, "1 rank -> 4 ranks");
    train_batch(four, slice_for(next, ctx.rank, 4), sft_loss);
    const auto next_four = full_state(four);
    if (ctx.rank == 0) expect_near(next_four, continued_single, kNextStepTol, "next step after 1 -> 4 ranks");

    // HSDP: shards of 2 ranks, replicated twice; only replica group 0 writes model and optimizer.
    auto hsdp_args = base_args("fsdp2", ctx.rank, 4, ctx.group, ctx.store);
    hsdp_args.engine.fsdp_size = 2;
    fsdp::FSDPEngine hsdp(hsdp_args, tiny_builder(kModel));
    hsdp.initialize();
    train_batch(hsdp, slice_for(make_batch(4, 8, 64, 30), ctx.rank, 4), sft_loss);
    hsdp.save_checkpoint(hsdp_dir, 1, 0);
    const auto saved_hsdp = full_state(hsdp);
    EXPECT_EQ(std::filesystem::exists(hsdp_dir + "/model_rank_" + std::to_string(ctx.rank) + ".bin"), ctx.rank < 2);
    train_batch(hsdp, slice_for(next, ctx.rank, 4), sft_loss);
    const auto continued_hsdp = full_state(hsdp);

    auto plain_args = base_args("fsdp", ctx.rank, 4, ctx.group, ctx.store);
    plain_args.engine.seed = 11;
    fsdp::FSDPEngine plain(plain_args, tiny_builder(kModel));
    plain.initialize();
    plain.load_checkpoint(hsdp_dir);
    expect_bitwise_equal(full_state(plain), saved_hsdp, "fsdp_size 2 -> fsdp_size 4");
    train_batch(plain, slice_for(next, ctx.rank, 4), sft_loss);
    expect_near(full_state(plain), continued_hsdp, kNextStepTol, "next step after fsdp_size 2 -> fsdp_size 4");

    // Ranks 0 and 1 alone, in a group of their own.
    if (ctx.rank < 2) {
      auto store = c10::make_intrusive<c10d::PrefixStore>("pair", ctx.store);
      auto pair = compat::make_gloo_group(store, ctx.rank, 2);
      auto two_args = base_args("fsdp2", ctx.rank, 2, pair, store);
      two_args.engine.seed = 12;
      fsdp::FSDPEngine two(two_args, tiny_builder(kModel));
      two.initialize();
      two.load_checkpoint(hsdp_dir);
      expect_bitwise_equal(full_state(two), saved_hsdp, "4 ranks fsdp_size 2 -> 2 ranks");
      train_batch(two, slice_for(next, ctx.rank, 2), sft_loss);
      expect_near(full_state(two), continued_hsdp, kNextStepTol, "next step after 4 ranks fsdp_size 2 -> 2 ranks");
    }
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
