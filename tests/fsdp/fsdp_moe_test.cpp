// qwen3_moe (models/moe.h) through the FSDP engine on 2 Gloo ranks: the experts and the router are sharded like any
// other parameter (each decoder layer one unit) and train as the same model unsharded; packed micro-batches with
// layer checkpointing train as padded ones, and so do Ulysses sequence groups (each rank routes its slice of the
// tokens); the per-tensor export yields every expert under its checkpoint name.
#include <gtest/gtest.h>

#include "models/model_factory.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/fsdp/ulysses_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

constexpr const char* kModel = "builtin:qwen3-moe-tiny";

class MoeEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeEngineTest, TrainsAsTheUnshardedModel) {
  const std::string strategy = GetParam();
  testing::run_ranks(2, [strategy](const testing::RankContext& ctx) {
    auto args = make_args(strategy, "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.model.path = kModel;
    args.optim.lr = 1e-3;
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    models::BuildOptions options;
    options.seed = args.engine.seed;
    Reference ref(args, models::build_model(args.model, args.model_type, options));
    auto params = engine_params(engine);
    EXPECT_TRUE(params.count("model.layers.0.mlp.experts.7.down_proj.weight"));
    EXPECT_TRUE(params.count("model.layers.2.mlp.gate.weight"));
    EXPECT_TRUE(params.count("model.layers.3.mlp.gate_proj.weight"));  // mlp_only_layers: the last layer is dense
    expect_params_near(params, *ref.model(), 0.0, "after initialize");
    for (int step = 0; step < 2; ++step) {
      Batch global = make_batch(4, 12, 256, 700 + step);
      auto out = train_batch(engine, rank_slice(global, ctx.rank, 2), sft_loss);
      ref.accumulate(global, sft_loss);
      const double ref_norm = ref.step();
      EXPECT_NEAR(out.grad_norm.item<double>(), ref_norm, 1e-5 * ref_norm) << "step " << step;
    }
    expect_params_near(engine_params(engine), *ref.model(), 2e-5, "after 2 steps");
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoeEngineTest, ::testing::Values("fsdp", "fsdp2"));

// model.use_remove_padding and per-layer checkpointing: the packed rows route each token as the padded batch does.
TEST(MoeEngine, PackedWithCheckpointingTrainsAsPadded) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto padded_args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    padded_args.model.path = kModel;
    padded_args.optim.lr = 1e-3;
    auto packed_args = padded_args;
    packed_args.model.use_remove_padding = true;
    packed_args.model.enable_gradient_checkpointing = true;
    fsdp::FSDPEngine padded(padded_args), packed(packed_args);
    padded.initialize();
    packed.initialize();
    for (int step = 0; step < 2; ++step) {
      Batch local = make_batch(2, 12, 256, 800 + 10 * step + ctx.rank);
      local.set_meta("calculate_entropy", true);
      const auto a = train_batch(padded, local, sft_loss), b = train_batch(packed, local, sft_loss);
      EXPECT_NEAR(b.loss.item<double>(), a.loss.item<double>(), 1e-5 * std::abs(a.loss.item<double>()));
      EXPECT_NEAR(b.grad_norm.item<double>(), a.grad_norm.item<double>(), 1e-5 * a.grad_norm.item<double>());
      for (const char* name : {"log_probs", "entropy"}) {
        EXPECT_TRUE(torch::allclose(b.outputs.at(name), a.outputs.at(name), 1e-5, 1e-5)) << name << ", step " << step;
      }
    }
    // Two AdamW steps of lr 1e-3 apart by at most 10% of one step: the packed rows reach each expert's GEMM in
    // another order and count, so gradients differ by fp32 rounding, which AdamW's normalisation turns into a
    // visible difference for entries whose gradient is near zero (embedding rows of tokens seen once).
    const auto want = engine_params(padded), got = engine_params(packed);
    for (const auto& [name, p] : want) EXPECT_LE((got.at(name) - p).abs().max().item<double>(), 1e-4) << name;
  });
}

// The router and the experts act on each token alone, so a sequence group's token slices route as the whole rows.
// The experts' and the router's gradients hold the dense models' 1e-5; the q/k projections and norms of the last
// two layers differ by up to 5e-5 of their largest entry (fp32 sums that cancel more in this model's attention),
// hence the looser gradient and parameter bars.
TEST(MoeEngine, UlyssesTwoWayMatchesDataParallel) {
  Tolerance tol;
  tol.grads = 1e-4;
  tol.params = 5e-5;
  testing::run_ranks(2, [tol](const testing::RankContext& ctx) {
    expect_variants_match_data_parallel(ctx, kModel, {{"sp 1"}, {"sp 2", 2}, {"sp 2, checkpointing", 2, false, true}},
                                        "fp32", tol);
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
