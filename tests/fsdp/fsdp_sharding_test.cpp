// World size 1 vs 2 vs 4 and HSDP (fsdp_size 2 of 4), both strategies, reshard_after_forward on and off: the same
// global batch gives the parameters and grad norms of an unsharded fp32 reference (plain model, torch AdamW).
#include <gtest/gtest.h>

#include "plugin/fsdp/fsdp_module.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

struct ShardCase {
  std::string strategy;
  int world;
  int64_t fsdp_size;
  bool reshard;
  bool tied;
  bool value_model;
};

void PrintTo(const ShardCase& c, std::ostream* os) {
  *os << c.strategy << " world " << c.world << " fsdp_size " << c.fsdp_size << " reshard " << c.reshard << " tied "
      << c.tied << " value " << c.value_model;
}

std::string case_name(const ::testing::TestParamInfo<ShardCase>& info) {
  const auto& c = info.param;
  return c.strategy + "_ws" + std::to_string(c.world) + (c.fsdp_size > 0 ? "_hsdp" + std::to_string(c.fsdp_size) : "") +
         (c.reshard ? "_reshard" : "_keep") + (c.tied ? "_tied" : "") + (c.value_model ? "_value" : "");
}

class ShardingTest : public ::testing::TestWithParam<ShardCase> {};

TEST_P(ShardingTest, MatchesUnshardedReference) {
  const ShardCase c = GetParam();
  testing::run_ranks(c.world, [c](const testing::RankContext& ctx) {
    TinyConfig model_cfg;
    model_cfg.tied = c.tied;
    model_cfg.value_head = c.value_model;
    auto args = make_args(c.strategy, "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
    args.engine.fsdp_size = c.fsdp_size;
    args.engine.reshard_after_forward = c.reshard;
    args.model_type = c.value_model ? "value_model" : "language_model";
    const LossFn loss = c.value_model ? LossFn(value_loss) : LossFn(sft_loss);

    std::shared_ptr<TinyDecoder> model;
    fsdp::FSDPEngine engine(args, tiny_builder(model_cfg, &model));
    engine.initialize();
    Reference ref(model_cfg, args);
    expect_params_near(engine_params(engine), *ref.model(), 0.0, "after initialize");

    // Inside the forward, an earlier decoder layer is resharded exactly when reshard_after_forward is on.
    auto* fsdp = engine.fsdp_module();
    std::vector<bool> layer1_sharded_during_layer2;
    model->probe = [&](size_t unit, const torch::Tensor&) {
      if (unit == 2) layer1_sharded_during_layer2.push_back(fsdp->units()[1].state() == fsdp::FsdpUnit::State::kSharded);
    };

    const int64_t global_rows = 8;
    for (int step = 0; step < 3; ++step) {
      Batch global = make_batch(global_rows, 10, model_cfg.vocab, 100 + step);
      auto out = train_batch(engine, rank_slice(global, ctx.rank, ctx.world_size), loss);
      ref.accumulate(global, loss);
      const double ref_norm = ref.step();
      EXPECT_NEAR(out.grad_norm.item<double>(), ref_norm, 1e-5 * std::max(1.0, ref_norm)) << "step " << step;
      EXPECT_GT(ref_norm, args.optim.clip_grad) << "the test should exercise clipping";
    }
    expect_params_near(engine_params(engine), *ref.model(), 2e-5, "after 3 steps");
    ASSERT_FALSE(layer1_sharded_during_layer2.empty());
    for (bool sharded : layer1_sharded_during_layer2) EXPECT_EQ(sharded, c.reshard);
    // Between steps nothing stays gathered.
    for (auto& u : fsdp->units()) EXPECT_EQ(u.state(), fsdp::FsdpUnit::State::kSharded) << u.name();
  });
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ShardingTest,
    ::testing::Values(ShardCase{"fsdp2", 1, -1, true, false, false}, ShardCase{"fsdp", 1, -1, true, true, false},
                      ShardCase{"fsdp2", 2, -1, true, true, false}, ShardCase{"fsdp", 2, -1, false, false, true},
                      ShardCase{"fsdp2", 4, -1, false, false, false}, ShardCase{"fsdp", 4, -1, true, false, false},
                      ShardCase{"fsdp2", 4, 2, true, false, true}, ShardCase{"fsdp", 4, 2, false, true, false}),
    case_name);

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery

namespace enginery {
namespace fsdp_test {
namespace {

// reduce_dtype is the dtype of the gradient reduction: fp16 reduces (with pre/post division) to the fp32 sum up to
// fp16 rounding, and differs from it — so the setting is really used.
TEST(ShardingReduceDtype, Fp16ReductionIsCloseButNotExact) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    double norms[2];
    for (int i = 0; i < 2; ++i) {
      auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
      args.engine.mixed_precision.reduce_dtype = i == 0 ? c10::kFloat : c10::kHalf;
      fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
      engine.initialize();
      EXPECT_EQ(engine.reduce_dtype(), i == 0 ? c10::kFloat : c10::kHalf);
      Batch global = make_batch(8, 10, 64, 900);
      engine.optimizer_zero_grad();
      forward_backward_batch(engine, rank_slice(global, ctx.rank, 2), sft_loss, false);
      norms[i] = engine.optimizer_step().item<double>();
    }
    EXPECT_NE(norms[0], norms[1]);
    EXPECT_NEAR(norms[1], norms[0], 2e-3 * norms[0]);
  });
}

// HSDP's shard and replicate subgroups wait as long as the host's world group (trainer.collective_timeout_s), not
// the backend's own default (Gloo's half hour): a peer lost inside a subgroup fails the step like one in the world.
TEST(ShardingHsdp, SubgroupsTakeTheWorldGroupsTimeout) {
  testing::run_ranks(4, [](const testing::RankContext& ctx) {
    const std::chrono::milliseconds timeout(7000);
    auto world = compat::make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("timeout_world", ctx.store),
                                         ctx.rank, 4, timeout);
    const auto groups = fsdp::DpGroups::create(make_args("fsdp", "fp32", ctx.rank, 4, world, ctx.store), 2);
    ASSERT_EQ(groups.shard->size(), 2);
    ASSERT_EQ(groups.replicate->size(), 2);
    EXPECT_EQ(groups.shard->group()->getBackendOptions()->timeout, timeout);
    EXPECT_EQ(groups.replicate->group()->getBackendOptions()->timeout, timeout);
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
