// Micro-batching and outputs over real Gloo ranks: 1 x B equals k x (B/k); gradients accumulate across two
// forward_backward_batch calls before one optimizer_step; forward-only outputs come back per micro-batch in order.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "engine_driver/micro_batch_plan.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

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
      auto a = train_batch(whole, rank_slice(global, ctx.rank, 2), sft_loss);
      auto b = train_batch(split, rank_slice(global, ctx.rank, 2), sft_loss);
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
    forward_backward_batch(engine, rank_slice(first, ctx.rank, 2), sft_loss, false);
    forward_backward_batch(engine, rank_slice(second, ctx.rank, 2), sft_loss, false);
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
      auto out = infer_batch(engine, local, loss);
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
      forward_backward_batch(engine, local, sft_loss, false);
      ADD_FAILURE() << "unequal micro-batch counts accepted";
    } catch (const EngineryError& e) {
      EXPECT_NE(std::string(e.what()).find("different numbers of micro-batches"), std::string::npos) << e.what();
    }
  });
}

// engine.use_dynamic_bsz: micro-batches formed by a token budget give the same loss, metrics, outputs (in the
// caller's order) and gradients as fixed micro-batches, on 2 Gloo ranks whose sequences differ in length and count:
// rank 0 has four rows (one over the budget), rank 1 two short ones and so runs a filler to match rank 0.
TEST(FsdpMicroBatch, DynamicBatchSizeEqualsFixedMicroBatches) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto fixed_args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    fixed_args.engine.micro_batch_size_per_gpu = 4;  // one micro-batch per rank
    auto dynamic_args = fixed_args;
    dynamic_args.engine.use_dynamic_bsz = true;
    dynamic_args.engine.max_token_len_per_gpu = 12;
    fsdp::FSDPEngine fixed(fixed_args, tiny_builder(TinyConfig{}));
    fsdp::FSDPEngine dynamic(dynamic_args, tiny_builder(TinyConfig{}));
    fixed.initialize();
    dynamic.initialize();

    Batch local = make_batch(ctx.rank == 0 ? 4 : 2, 16, 64, 95 + ctx.rank);
    const std::vector<int64_t> lengths = ctx.rank == 0 ? std::vector<int64_t>{5, 16, 7, 6} : std::vector<int64_t>{3, 4};
    auto mask = torch::zeros({local.size(), 16}, torch::kLong);
    for (size_t r = 0; r < lengths.size(); ++r) mask[static_cast<int64_t>(r)].narrow(0, 0, lengths[r]).fill_(1);
    local.set("attention_mask", mask);
    local.set("loss_mask", (mask * (torch::arange(16) >= 2).to(torch::kLong)).to(torch::kFloat));
    local.set_meta("calculate_entropy", true);

    for (int step = 0; step < 2; ++step) {
      fixed.optimizer_zero_grad();
      dynamic.optimizer_zero_grad();
      const BatchOutput a = forward_backward_batch(fixed, local, sft_loss, false);
      const BatchOutput b = forward_backward_batch(dynamic, local, sft_loss, false);
      EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-6 * std::abs(a.loss.item<double>()));
      for (const char* name : {"log_probs", "entropy"}) {
        ASSERT_TRUE(b.outputs.count(name)) << name;
        EXPECT_TRUE(torch::allclose(a.outputs.at(name), b.outputs.at(name), 1e-6, 1e-6)) << name;
      }
      // Metrics are means over the real micro-batches: the fixed run's one micro-batch holds every token.
      // Rank 0 fits its rows into 3 micro-batches ({16}, {7}, {6, 5}: 16 alone, over the budget); rank 1 spreads
      // its two rows over the agreed 3 and runs one filler.
      const double real = ctx.rank == 0 ? 3.0 : 2.0;
      EXPECT_NEAR(b.metrics.at("tokens").item<double>() * real, a.metrics.at("tokens").item<double>(), 1e-9);
      // The reduced gradients (this rank's shards) agree to fp32 summation order: up to 1.5e-6 of the largest entry
      // on an AVX-512 machine, whose matmul kernels block the micro-batches' shapes differently.
      fixed.fsdp_module()->settle_grads();
      dynamic.fsdp_module()->settle_grads();
      auto& units_a = fixed.fsdp_module()->units();
      auto& units_b = dynamic.fsdp_module()->units();
      for (size_t u = 0; u < units_a.size(); ++u) {
        const auto ga = units_a[u].shard_grad().to(torch::kFloat), gb = units_b[u].shard_grad().to(torch::kFloat);
        const double scale = ga.abs().max().item<double>();
        EXPECT_LE((ga - gb).abs().max().item<double>(), 5e-6 * scale) << units_a[u].name() << ", step " << step;
      }
      const double na = fixed.optimizer_step().item<double>(), nb = dynamic.optimizer_step().item<double>();
      EXPECT_NEAR(na, nb, 1e-6 * na);
    }
  });
}

// A rank that runs a filler (fewer micro-batches than another rank) hands the caller's loss function only its own
// micro-batches: the filler's zero loss is the loop's (engine_driver/step_loop.cpp), so a loss that divides by its
// micro-batch's targets (a per-micro-batch mean) or reads its rows cannot be fed a micro-batch that is not the
// caller's data. Before, the filler reached the loss function, and enginery.verl had to detect it itself.
TEST(FsdpMicroBatch, FillersNeverReachTheLossFunction) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.use_dynamic_bsz = true;
    args.engine.max_token_len_per_gpu = 12;
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    Batch local = make_batch(ctx.rank == 0 ? 4 : 2, 16, 64, 95 + ctx.rank);
    const std::vector<int64_t> lengths = ctx.rank == 0 ? std::vector<int64_t>{5, 16, 7, 6} : std::vector<int64_t>{3, 4};
    auto mask = torch::zeros({local.size(), 16}, torch::kLong);
    for (size_t r = 0; r < lengths.size(); ++r) mask[static_cast<int64_t>(r)].narrow(0, 0, lengths[r]).fill_(1);
    local.set("attention_mask", mask);
    local.set("loss_mask", (mask * (torch::arange(16) >= 2).to(torch::kLong)).to(torch::kFloat));

    int calls = 0;
    const LossFn counting = [&](const ModelOutput& out, const Batch& micro, const LossContext& c) {
      ++calls;
      EXPECT_GT(micro.at("loss_mask").sum().item<double>(), 0.0) << "micro-batch " << c.micro_batch_index;
      return sft_loss(out, micro, c);
    };
    const BatchOutput got = forward_backward_batch(engine, local, counting, false);
    // Rank 0 runs 3 micro-batches of its own; rank 1 spreads its 2 rows over 2 and runs 1 filler.
    EXPECT_EQ(calls, ctx.rank == 0 ? 3 : 2);
    EXPECT_EQ(got.outputs.at("log_probs").size(0), local.size());
    EXPECT_TRUE(torch::isfinite(engine.optimizer_step()).item<bool>());
  });
}

// verl sends micro_batch_size_per_gpu / use_dynamic_bsz / max_token_len_per_gpu with each call (a log-prob pass
// may cut differently from the update): batch metadata overrides the engine's configuration for that call only.
// Metrics are means over micro-batches, so the "tokens" metric tells how many micro-batches ran.
TEST(FsdpMicroBatch, PerCallMetadataOverridesTheConfiguredMicroBatching) {
  auto args = make_args("fsdp2", "fp32");
  args.engine.micro_batch_size_per_gpu = 4;
  fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
  engine.initialize();
  Batch batch = make_batch(4, 9, 64, 97);
  const double total = infer_batch(engine, batch, sft_loss).metrics.at("tokens").item<double>();

  Batch per_row = batch;
  per_row.set_meta("micro_batch_size_per_gpu", int64_t{1});
  const BatchOutput split = infer_batch(engine, per_row, sft_loss);
  EXPECT_NEAR(split.metrics.at("tokens").item<double>() * 4, total, 1e-9) << "four micro-batches of one row";

  Batch dynamic = batch;
  dynamic.set_meta("use_dynamic_bsz", true);
  dynamic.set_meta("max_token_len_per_gpu", int64_t{1000});
  EXPECT_NEAR(infer_batch(engine, dynamic, sft_loss).metrics.at("tokens").item<double>(), total, 1e-9)
      << "one micro-batch holds every row under a large budget";
  // The next call without metadata is back to the configuration.
  EXPECT_NEAR(infer_batch(engine, batch, sft_loss).metrics.at("tokens").item<double>(), total, 1e-9);

  auto error_of = [&](const std::string& name, MetaValue value) -> std::string {
    Batch bad = batch;
    bad.set_meta(name, std::move(value));
    try {
      infer_batch(engine, bad, sft_loss);
    } catch (const EngineryError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("micro_batch_size_per_gpu", std::string("two")).find("batch metadata 'micro_batch_size_per_gpu'"),
            std::string::npos);
  EXPECT_NE(error_of("micro_batch_size_per_gpu", int64_t{0}).find("batch metadata 'micro_batch_size_per_gpu': must be positive"),
            std::string::npos);
  EXPECT_NE(error_of("use_dynamic_bsz", int64_t{1}).find("batch metadata 'use_dynamic_bsz'"), std::string::npos);
}

TEST(MicroBatchPlan, TokenBudgetBalancesAndPadsToTheAgreedCount) {
  // Fixed: consecutive rows.
  EXPECT_EQ(plan_by_rows(5, 2).rows, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
  // Fewest micro-batches that fit 10 tokens: {9}, {6, 4}... first-fit decreasing needs 3 for {9, 6, 4, 3, 2}.
  const std::vector<int64_t> tokens{4, 9, 2, 6, 3};
  EXPECT_EQ(min_micro_batches(tokens, 10), 3);
  const MicroBatchPlan three = plan_by_tokens(tokens, 10, 3);
  ASSERT_EQ(three.rows.size(), 3u);
  std::vector<int64_t> seen;
  for (const auto& rows : three.rows) {
    int64_t load = 0;
    for (int64_t r : rows) load += tokens[static_cast<size_t>(r)];
    EXPECT_LE(load, 10);
    EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
    seen.insert(seen.end(), rows.begin(), rows.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(three.oversize);
  // Another rank needed 7: five rows spread one per micro-batch, two fillers.
  const MicroBatchPlan seven = plan_by_tokens(tokens, 10, 7);
  ASSERT_EQ(seven.rows.size(), 7u);
  EXPECT_EQ(std::count_if(seven.rows.begin(), seven.rows.end(), [](const auto& r) { return r.empty(); }), 2);
  // A row over the budget runs alone.
  const MicroBatchPlan big = plan_by_tokens({30, 2, 3}, 10, min_micro_batches({30, 2, 3}, 10));
  EXPECT_TRUE(big.oversize);
  EXPECT_EQ(big.rows.size(), 2u);
  EXPECT_THROW(plan_by_tokens(tokens, 0, 1), EngineryError);
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
