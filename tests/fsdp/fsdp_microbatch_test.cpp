// Micro-batching and outputs over real Gloo ranks: 1 x B equals k x (B/k); gradients accumulate across two
// forward_backward_batch calls before one optimizer_step; forward-only outputs come back per micro-batch in order.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"

namespace enginery {
namespace fsdp_test {
namespace {

TEST(FsdpMicroBatch, OneTimesBEqualsKTimesBOverK) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto whole_args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    whole_args.engine.micro_batch_size_per_gpu = 4;
    auto split_args = whole_args;
    split_args.engine.micro_batch_size_per_gpu = 1;
    fsdp::FSDPEngine whole(whole_args, tiny_builder(TinyConfig{}));
    fsdp::FSDPEngine split(split_args, tiny_builder(TinyConfig{}));
    whole.initialize();
    split.initialize();
    Reference ref(TinyConfig{}, whole_args);
    for (int step = 0; step < 2; ++step) {
      Batch global = make_batch(8, 9, 64, 60 + step);
      auto a = whole.train_batch(rank_slice(global, ctx.rank, 2), sft_loss);
      auto b = split.train_batch(rank_slice(global, ctx.rank, 2), sft_loss);
      ref.accumulate(global, sft_loss);
      const double ref_norm = ref.step();
      EXPECT_NEAR(a.grad_norm.item<double>(), ref_norm, 1e-5 * ref_norm);
      EXPECT_NEAR(b.grad_norm.item<double>(), ref_norm, 1e-5 * ref_norm);
      // The summed micro-batch losses are the same global token mean either way.
      EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-5);
    }
    expect_params_near(engine_params(whole), *ref.model(), 2e-5, "1 x B");
    expect_params_near(engine_params(split), *ref.model(), 2e-5, "4 x B/4");
  });
}

TEST(FsdpMicroBatch, GradientsAccumulateAcrossCalls) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    Reference ref(TinyConfig{}, args);
    Batch first = make_batch(4, 8, 64, 70), second = make_batch(4, 8, 64, 71);
    engine.optimizer_zero_grad();
    engine.forward_backward_batch(rank_slice(first, ctx.rank, 2), sft_loss, false);
    engine.forward_backward_batch(rank_slice(second, ctx.rank, 2), sft_loss, false);
    auto norm = engine.optimizer_step();
    ref.accumulate(first, sft_loss);
    ref.accumulate(second, sft_loss);
    const double ref_norm = ref.step();
    EXPECT_NEAR(norm.item<double>(), ref_norm, 1e-5 * ref_norm);
    expect_params_near(engine_params(engine), *ref.model(), 2e-5, "two calls, one step");
  });
}

TEST(FsdpMicroBatch, ForwardOnlyOutputsInOrder) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    for (bool value_model : {false, true}) {
      SCOPED_TRACE(value_model ? "value_model" : "language_model");
      TinyConfig cfg;
      cfg.value_head = value_model;
      auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
      args.engine.micro_batch_size_per_gpu = 1;
      fsdp::FSDPEngine engine(args, tiny_builder(cfg));
      engine.initialize();
      Reference ref(cfg, args);
      Batch global = make_batch(6, 8, 64, 80);
      global.set_meta("calculate_entropy", true);
      Batch local = rank_slice(global, ctx.rank, 2);
      const LossFn loss = value_model ? LossFn(value_loss) : LossFn(sft_loss);
      auto out = engine.infer_batch(local, loss);
      EXPECT_TRUE(engine.is_training()) << "infer_batch must restore the mode";

      torch::NoGradGuard no_grad;
      models::HeadOptions head;
      head.compute_entropy = true;
      auto expected = ref.model()->forward({local.at("input_ids"), local.at("attention_mask"), {}}, head, nullptr);
      LossContext ctx_ref;
      ctx_ref.global_num_tokens = target_tokens(global);
      const double expected_loss = loss(expected, local, ctx_ref).loss.item<double>();
      EXPECT_NEAR(out.loss.item<double>(), expected_loss, 1e-5);
      if (value_model) {
        ASSERT_TRUE(out.outputs.count("values"));
        EXPECT_TRUE(torch::allclose(out.outputs["values"], expected.values, 1e-5, 1e-5));
        EXPECT_FALSE(out.outputs.count("log_probs"));
      } else {
        ASSERT_TRUE(out.outputs.count("log_probs") && out.outputs.count("entropy"));
        EXPECT_TRUE(torch::allclose(out.outputs["log_probs"], expected.log_probs, 1e-5, 1e-5));
        EXPECT_TRUE(torch::allclose(out.outputs["entropy"], expected.entropy, 1e-5, 1e-5));
      }
      for (auto& u : engine.fsdp_module()->units()) {
        EXPECT_EQ(u.state(), fsdp::FsdpUnit::State::kSharded);
        for (const auto& p : u.params()) EXPECT_FALSE(p.grad().defined());
      }
    }
  });
}

TEST(FsdpMicroBatch, UnequalMicroBatchCountsAreAnError) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.micro_batch_size_per_gpu = 1;
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    Batch local = make_batch(ctx.rank == 0 ? 2 : 3, 8, 64, 90);
    try {
      engine.forward_backward_batch(local, sft_loss, false);
      ADD_FAILURE() << "unequal micro-batch counts accepted";
    } catch (const EngineryError& e) {
      EXPECT_NE(std::string(e.what()).find("different numbers of micro-batches"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
