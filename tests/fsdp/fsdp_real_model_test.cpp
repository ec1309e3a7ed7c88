// The engine with the models library's own decoders (no ModelBuilder: the plugin's default path), sharded over
// real Gloo ranks, against the same model trained unsharded.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "models/model_factory.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"

namespace enginery {
namespace fsdp_test {
namespace {

class RealModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealModelTest, BuiltinModelMatchesUnshardedReference) {
  const std::string strategy = GetParam();
  testing::run_ranks(2, [strategy](const testing::RankContext& ctx) {
    auto args = make_args(strategy, "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.model.path = strategy == "fsdp2" ? "builtin:qwen2-tiny" : "builtin:llama-tiny";
    args.engine.reshard_after_forward = strategy == "fsdp2";
    args.optim.lr = 1e-3;
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    models::BuildOptions options;
    options.seed = args.engine.seed;
    Reference ref(args, models::build_model(args.model, args.model_type, options));
    auto params = engine_params(engine);
    EXPECT_TRUE(params.count("model.embed_tokens.weight")) << "parameters keep their Hugging Face names";
    expect_params_near(params, *ref.model(), 0.0, "after initialize");
    for (int step = 0; step < 2; ++step) {
      Batch global = make_batch(4, 12, 256, 500 + step);
      auto out = engine.train_batch(rank_slice(global, ctx.rank, 2), sft_loss);
      ref.accumulate(global, sft_loss);
      const double ref_norm = ref.step();
      EXPECT_NEAR(out.grad_norm.item<double>(), ref_norm, 1e-5 * ref_norm) << "step " << step;
    }
    expect_params_near(engine_params(engine), *ref.model(), 2e-5, "after 2 steps");
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, RealModelTest, ::testing::Values("fsdp", "fsdp2"));

TEST(RealModel, UnknownModelPathNamesTheAllowedOnes) {
  auto args = make_args("fsdp2", "fp32");
  args.model.path = "builtin:nope";
  fsdp::FSDPEngine engine(args);
  try {
    engine.initialize();
    FAIL() << "an unknown built-in model was accepted";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("builtin:qwen2-tiny"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
