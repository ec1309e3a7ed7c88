// The host loop's batch checks over real Gloo ranks (engine_driver/batch_check.h): a rank that refuses its batch
// stops every rank before any work, itself with the field and the row, the others naming it, instead of leaving
// them in a collective; a call whose loss has no target token on any rank stops every rank, naming loss_mask.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "host_api/error.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

std::string message_of(fsdp::FSDPEngine& engine, const Batch& batch) {
  try {
    train_batch(engine, batch, sft_loss);
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "(no error)";
}

// Fixed micro-batches agree in the token count's all-reduce; dynamic ones take part in the micro-batch count's first.
class FsdpBatchCheck : public ::testing::TestWithParam<bool> {};

TEST_P(FsdpBatchCheck, ARankThatRefusesItsBatchStopsEveryRankBeforeAnyWork) {
  const bool dynamic = GetParam();
  testing::run_ranks(2, [dynamic](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.use_dynamic_bsz = dynamic;
    args.engine.max_token_len_per_gpu = 16;
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    fsdp::FSDPEngine untouched(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    untouched.initialize();
    const Batch good = rank_slice(make_batch(4, 8, 64, 80), ctx.rank, 2);
    Batch bad = good.slice(0, good.size());
    auto attention = good.at("attention_mask").clone();
    attention[1][0] = 2;
    bad.set("attention_mask", attention);

    const std::string got = message_of(engine, ctx.rank == 1 ? bad : good);
    const std::string want = ctx.rank == 1 ? "batch['attention_mask'] row 1: token 0 is 2 (allowed: 0 or 1 per token)"
                                           : "rank 0, forward_backward_batch: rank 1 refused its batch";
    EXPECT_NE(got.find(want), std::string::npos) << got;
    // Nothing ran on either rank: the next step is that of an engine that never saw the batch.
    const double next = train_batch(engine, good, sft_loss).grad_norm.item<double>();
    EXPECT_EQ(next, train_batch(untouched, good, sft_loss).grad_norm.item<double>());
  });
}

INSTANTIATE_TEST_SUITE_P(MicroBatching, FsdpBatchCheck, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Dynamic" : "Fixed"; });

// All-zero loss masks on every rank: the loss would be 0 / 0 (NaN, and the step skipped without naming the mask).
// One rank without a target among ranks with some is a normal call.
TEST(FsdpBatchCheckTargets, NoTargetOnAnyRankIsNamedOnEveryRank) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    fsdp::FSDPEngine engine(make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store), tiny_builder(TinyConfig{}));
    engine.initialize();
    const Batch good = rank_slice(make_batch(4, 8, 64, 81), ctx.rank, 2);
    Batch none = good.slice(0, good.size());
    none.set("loss_mask", torch::zeros_like(good.at("loss_mask")));

    const std::string got = message_of(engine, none);
    EXPECT_NE(got.find("batch['loss_mask']: has no target token on any rank"), std::string::npos) << got;
    const BatchOutput out = train_batch(engine, ctx.rank == 0 ? none : good, sft_loss);
    EXPECT_TRUE(std::isfinite(out.grad_norm.item<double>()));
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
