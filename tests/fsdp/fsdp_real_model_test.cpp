// The engine with the models library's own decoders (no ModelBuilder: the plugin's default path), sharded over
// real Gloo ranks, against the same model trained unsharded.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/model_factory.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

class RealModelTest : public ::testing::TestWithParam<std::string> {};

// The same batch through several engines: each one's loss and gradient norm within 1e-5 (relative) of the first's.
void expect_losses_and_norms_match(const std::vector<BatchOutput>& outs, const std::vector<std::string>& names,
                                   int step) {
  const double loss = outs[0].loss.item<double>(), norm = outs[0].grad_norm.item<double>();
  for (size_t i = 1; i < outs.size(); ++i) {
    const std::string what = names[i] + ", step " + std::to_string(step);
    EXPECT_NEAR(outs[i].loss.item<double>(), loss, 1e-5 * std::abs(loss)) << what;
    EXPECT_NEAR(outs[i].grad_norm.item<double>(), norm, 1e-5 * norm) << what;
  }
}

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
      auto out = train_batch(engine, rank_slice(global, ctx.rank, 2), sft_loss);
      ref.accumulate(global, sft_loss);
      const double ref_norm = ref.step();
      EXPECT_NEAR(out.grad_norm.item<double>(), ref_norm, 1e-5 * ref_norm) << "step " << step;
    }
    expect_params_near(engine_params(engine), *ref.model(), 2e-5, "after 2 steps");
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, RealModelTest, ::testing::Values("fsdp", "fsdp2"));

// model.use_remove_padding through the engine: packed micro-batches (alone and with engine.use_dynamic_bsz) give
// the padded run's loss, outputs, gradient norm and parameters on 2 Gloo ranks whose sequences differ in length,
// padding side and count.
TEST(RealModel, RemovePaddingMatchesPaddedOnRaggedRanks) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto padded_args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    padded_args.model.path = "builtin:qwen3-tiny";
    padded_args.optim.lr = 1e-3;
    padded_args.engine.micro_batch_size_per_gpu = 4;  // one micro-batch on each rank; dynamic makes two
    auto packed_args = padded_args;
    packed_args.model.use_remove_padding = true;
    auto dynamic_args = packed_args;
    dynamic_args.engine.use_dynamic_bsz = true;
    dynamic_args.engine.max_token_len_per_gpu = 20;
    std::vector<std::unique_ptr<fsdp::FSDPEngine>> engines;
    for (const auto& a : {padded_args, packed_args, dynamic_args}) {
      engines.push_back(std::make_unique<fsdp::FSDPEngine>(a));
      engines.back()->initialize();
    }
    const int64_t rows = ctx.rank == 0 ? 4 : 2, seq = 16;
    const auto lengths = ctx.rank == 0 ? std::vector<int64_t>{16, 3, 9, 1} : std::vector<int64_t>{12, 7};
    for (int step = 0; step < 2; ++step) {
      Batch local = make_batch(rows, seq, 256, 600 + 10 * step + ctx.rank);
      auto mask = torch::zeros({rows, seq}, torch::kLong);
      for (int64_t r = 0; r < rows; ++r) mask[r].narrow(0, r % 2 ? seq - lengths[r] : 0, lengths[r]).fill_(1);
      local.set("attention_mask", mask);
      local.set("loss_mask", mask.to(torch::kFloat));
      local.set_meta("calculate_entropy", true);
      std::vector<BatchOutput> outs;
      for (auto& e : engines) outs.push_back(train_batch(*e, local, sft_loss));
      expect_losses_and_norms_match(outs, {"padded", "packed", "packed + dynamic"}, step);
      for (size_t i = 1; i < outs.size(); ++i) {
        const std::string what = (i == 1 ? "packed, step " : "packed + dynamic, step ") + std::to_string(step);
        for (const char* name : {"log_probs", "entropy"}) {
          EXPECT_TRUE(torch::allclose(outs[i].outputs.at(name), outs[0].outputs.at(name), 1e-5, 1e-5))
              << name << ", " << what;
        }
      }
    }
    // Two AdamW steps of lr 1e-3 apart by at most 2% of one step.
    const auto padded = engine_params(*engines[0]);
    for (size_t i = 1; i < engines.size(); ++i) {
      const auto got = engine_params(*engines[i]);
      for (const auto& [name, p] : padded) {
        const double diff = (got.at(name) - p).abs().max().item<double>();
        EXPECT_LE(diff, 2e-5) << name << ", engine " << i;
      }
    }
  });
}

// [engine.<backend>] gradient_checkpointing_policy through the engine on 2 Gloo ranks: recomputing whole layers or
// only the MLP blocks gives what storing every activation gives (fp32: losses, norms and parameters to rounding).
TEST(RealModel, CheckpointingPoliciesTrainAsStoredActivations) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto plain_args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    plain_args.model.path = "builtin:qwen2-tiny";
    plain_args.optim.lr = 1e-3;
    auto layer_args = plain_args;
    layer_args.model.enable_gradient_checkpointing = true;
    auto mlp_args = layer_args;
    mlp_args.engine.backend_options["gradient_checkpointing_policy"] = std::string("mlp");
    std::vector<std::unique_ptr<fsdp::FSDPEngine>> engines;
    for (const auto& a : {plain_args, layer_args, mlp_args}) {
      engines.push_back(std::make_unique<fsdp::FSDPEngine>(a));
      engines.back()->initialize();
    }
    const std::vector<models::Recompute> want{models::Recompute::kNothing, models::Recompute::kLayer,
                                              models::Recompute::kMlp};
    for (size_t i = 0; i < engines.size(); ++i) {
      auto lm = std::dynamic_pointer_cast<models::CausalLM>(engines[i]->model());
      ASSERT_TRUE(lm);
      EXPECT_EQ(lm->recompute(), want[i]) << "engine " << i;
    }
    for (int step = 0; step < 2; ++step) {
      const Batch local = make_batch(2, 12, 256, 700 + 10 * step + ctx.rank);
      std::vector<BatchOutput> outs;
      for (auto& e : engines) outs.push_back(train_batch(*e, local, sft_loss));
      expect_losses_and_norms_match(outs, {"stored", "layer", "mlp"}, step);
    }
    // Two AdamW steps of lr 1e-3 apart by at most 2% of one step (AdamW divides tiny gradients by their own size).
    const auto plain = engine_params(*engines[0]);
    for (size_t i = 1; i < engines.size(); ++i) {
      const auto got = engine_params(*engines[i]);
      for (const auto& [name, p] : plain) EXPECT_LE((got.at(name) - p).abs().max().item<double>(), 2e-5) << name;
    }
  });
}

TEST(RealModel, CheckpointingPolicyIsRefusedByNameWhenItCannotApply) {
  auto message = [](bool checkpointing, const std::string& policy) {
    auto args = make_args("fsdp2", "fp32");
    args.model.path = "builtin:qwen2-tiny";
    args.model.enable_gradient_checkpointing = checkpointing;
    args.engine.backend_options["gradient_checkpointing_policy"] = std::string(policy);
    try {
      fsdp::FSDPEngine engine(args);  // refused at construction, before any work
    } catch (const EngineryError& e) {
      EXPECT_EQ(e.where(), "engine.fsdp2.gradient_checkpointing_policy");
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(true, "mlp"), "");
  EXPECT_EQ(message(false, "layer"), "");
  EXPECT_NE(message(true, "attention").find("unknown policy 'attention' (allowed: layer, mlp)"), std::string::npos);
  EXPECT_NE(message(false, "mlp").find("model.enable_gradient_checkpointing is false"), std::string::npos);
}

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
