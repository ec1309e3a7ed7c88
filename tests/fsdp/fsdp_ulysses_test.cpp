// Ulysses sequence parallelism ([engine.<backend>] ulysses_sequence_parallel_size; docs/ARCHITECTURE.md,
// "Sequence parallelism") over real Gloo ranks: engines with a sequence-parallel size s > 1, fed the same global
// batch as verl feeds them (the ranks of a sequence group share their data-parallel rank's rows), equal the engine
// without it in fp32: the global loss, every output row, this rank's gradient shards (the same FSDP layout over the
// world), the grad norm and the parameters after two steps. Packed micro-batches, fixed and dynamic, and activation
// checkpointing (its recompute exchanges heads again in backward). A packed input (cu_seqlens) to the model and to
// the engine's forward_step.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/model_args.h"
#include "models/model_factory.h"
#include "models/sequence_parallel.h"
#include "tests/fsdp/ulysses_test_util.h"
#include "engine_driver/engine_access.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

// qwen3 (q/k norms, head_dim != hidden / heads; 4 query and 2 kv heads: one kv head per rank).
TEST(Ulysses, TwoWayMatchesDataParallelOnTwoRanks) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    expect_variants_match_data_parallel(ctx, "builtin:qwen3-tiny",
                                        {{"sp 1"}, {"sp 2", 2}, {"sp 2, dynamic", 2, true},
                                         {"sp 2, checkpointing", 2, false, true}});
  });
}

// verl's critic: the value head's scores gathered over the group (llama: no tied embeddings, llama3 rope).
TEST(Ulysses, ValueModelTwoWayMatchesDataParallelOnTwoRanks) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    Variant one{"value, sp 1"}, two{"value, sp 2", 2};
    one.value_model = two.value_model = true;
    expect_variants_match_data_parallel(ctx, "builtin:llama-tiny", {one, two});
  });
}

// qwen2 (tied embeddings, biases): sp 2 with 2 data-parallel groups, and sp 4, where its 2 kv heads are repeated
// so that each rank gets the one its query head reads; sp 2 with HSDP (shards within pairs, replicas across).
TEST(Ulysses, TwoAndFourWayMatchDataParallelOnFourRanks) {
  testing::run_ranks(4, [](const testing::RankContext& ctx) {
    Variant hsdp{"sp 2, hsdp (fsdp_size 2)", 2};
    hsdp.fsdp_size = 2;
    expect_variants_match_data_parallel(ctx, "builtin:qwen2-tiny", {{"sp 1"}, {"sp 2", 2}, {"sp 4", 4}, hsdp});
  });
}

std::string error_of(const std::function<void()>& f);

// Ranks of a group given different rows (as a caller slicing by world rank would) would each train a slice of
// another sequence: refused on every rank, before the first micro-batch computes.
TEST(Ulysses, GroupWhoseRanksHoldDifferentRowsIsRefusedOnEveryRank) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    fsdp::FSDPEngine engine(ulysses_args(ctx, "builtin:qwen3-tiny", {"sp 2", 2}, "fp32", {}));
    engine.initialize();
    const Batch shared = ragged_batch(4, 16, 77);
    EXPECT_EQ(error_of([&] { forward_backward_batch(engine, shared, loss_with_entropy, false); }), "");
    const Batch own = ragged_batch(4, 16, 78 + ctx.rank);
    const std::string error = error_of([&] { forward_backward_batch(engine, own, loss_with_entropy, false); });
    EXPECT_NE(error.find("holds different micro-batches on ranks 0 and 1"), std::string::npos) << error;
    EXPECT_NE(error.find("engine.fsdp2.ulysses_sequence_parallel_size"), std::string::npos) << error;
  });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "";
}

// A packed input (cu_seqlens, host_api/batch.h's [Note: packed batch]) under Ulysses: the model over the 2 Gloo
// ranks (sp 2) equals the same model alone (sp 1): outputs, and every gradient summed over the group (each rank's
// backward keeps its slice's part). An empty sequence, a one-token one, and a token count the group does not divide.
TEST(Ulysses, PackedInputTwoWayMatchesTheModelAlone) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    fsdp::UlyssesGroup group(std::make_shared<fsdp::Collectives>(ctx.group, ctx.rank, ctx.world_size));
    const std::vector<std::pair<std::string, std::string>> models{{"builtin:qwen3-tiny", "language_model"},
                                                                  {"builtin:llama-tiny", "value_model"}};
    for (const auto& [path, type] : models) {
      for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{5, 0, 1, 7, 2}, {4, 1, 0, 3}}) {
        SCOPED_TRACE(path + " " + type + ", " + std::to_string(lengths.size()) + " sequences");
        torch::manual_seed(3);
        ModelConfig cfg;
        cfg.path = path;
        auto model = models::build_model(cfg, type);
        std::vector<int64_t> cu{0};
        for (int64_t len : lengths) cu.push_back(cu.back() + len);
        const int64_t n = cu.back();
        models::ModelInputs in;
        in.input_ids = torch::randint(0, 256, {n}, torch::kLong);
        in.cu_seqlens = torch::tensor(cu, torch::kLong);
        in.remove_padding = true;
        models::HeadOptions head;
        head.compute_entropy = type == "language_model";
        const auto weights = torch::arange(n, torch::kFloat).remainder(5).add(1);
        auto run = [&](const models::SequenceParallelGroup* sp) {
          model->zero_grad();
          in.sequence_parallel = sp;
          auto out = model->forward(in, head, nullptr);
          auto loss = out.values.defined() ? (out.values * weights).sum()
                                           : (out.log_probs * weights).sum() + 0.1 * (out.entropy * weights).sum();
          loss.backward();
          std::vector<torch::Tensor> grads;
          for (auto& p : model->parameters()) {
            grads.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
          }
          return std::make_pair(out, torch::cat(grads));
        };
        const auto [alone, grads_alone] = run(nullptr);
        const auto [split, grads_split] = run(&group);
        const std::vector<std::pair<torch::Tensor, torch::Tensor>> outputs{
            {split.log_probs, alone.log_probs}, {split.entropy, alone.entropy}, {split.values, alone.values}};
        for (const auto& [got, want] : outputs) {
          if (!want.defined()) continue;
          ASSERT_EQ(got.sizes(), (std::vector<int64_t>{n}));
          EXPECT_LE(max_rel_diff(got, want), 1e-5);
        }
        // verl's alignment: nothing at a sequence's last token.
        if (alone.log_probs.defined()) {
          for (size_t k = 1; k < cu.size(); ++k) {
            if (cu[k] > cu[k - 1]) EXPECT_EQ(split.log_probs[cu[k] - 1].item<double>(), 0.0);
          }
        }
        EXPECT_LE(max_rel_diff(all_gather(ctx, grads_split).sum(0), grads_alone), 5e-5);
      }
    }
  });
}

// The FSDP engine hands a packed micro-batch to the model (cu_seqlens, no attention_mask) and checks that the
// ranks of a sequence group hold the same one: sp 2 gives the outputs of sp 1, and different rows are refused.
TEST(Ulysses, EngineTakesAPackedMicroBatchAndChecksTheGroupShareIt) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    fsdp::FSDPEngine one(ulysses_args(ctx, "builtin:qwen3-tiny", {"sp 1"}, "fp32", {}));
    fsdp::FSDPEngine two(ulysses_args(ctx, "builtin:qwen3-tiny", {"sp 2", 2}, "fp32", {}));
    one.initialize();
    two.initialize();
    auto packed = [](uint64_t seed) {
      torch::manual_seed(seed);
      Batch b;
      b.set("input_ids", torch::randint(0, 256, {13}, torch::kLong));
      b.set("cu_seqlens", torch::tensor({0, 6, 6, 7, 13}, torch::kLong));
      return b;
    };
    LossContext lc;
    lc.calculate_entropy = true;
    torch::NoGradGuard no_grad;
    const auto a = EngineAccess::forward_step(one, packed(5), LossFn(), lc, /*forward_only=*/true).output;
    const auto b = EngineAccess::forward_step(two, packed(5), LossFn(), lc, /*forward_only=*/true).output;
    ASSERT_EQ(b.log_probs.sizes(), (std::vector<int64_t>{13}));
    EXPECT_LE(max_rel_diff(b.log_probs, a.log_probs), 1e-5);
    EXPECT_LE(max_rel_diff(b.entropy, a.entropy), 1e-5);
    const std::string error = error_of([&] { EngineAccess::forward_step(two, packed(6 + ctx.rank), LossFn(), lc, true); });
    EXPECT_NE(error.find("holds different micro-batches on ranks 0 and 1"), std::string::npos) << error;
  });
}

TEST(Ulysses, SizeThatDoesNotDivideTheWorldIsRefusedByName) {
  EngineArgs args;
  args.world_size = 4;
  args.engine.strategy = "fsdp2";
  args.model.use_remove_padding = true;
  args.engine.backend_options[fsdp::kUlyssesSize] = int64_t{3};
  const std::string error = error_of([&] { fsdp::ulysses_size_wanted(args); });
  EXPECT_NE(error.find("engine.fsdp2.ulysses_sequence_parallel_size"), std::string::npos) << error;
  EXPECT_NE(error.find("(allowed: 1, 2, 4)"), std::string::npos) << error;
  args.engine.backend_options[fsdp::kUlyssesSize] = std::string("two");
  EXPECT_NE(error_of([&] { fsdp::ulysses_size_wanted(args); }).find("(allowed: an integer)"), std::string::npos);
  args.engine.backend_options[fsdp::kUlyssesSize] = int64_t{2};
  EXPECT_EQ(fsdp::ulysses_size_wanted(args), 2);
  args.model.use_remove_padding = false;  // verl requires it too
  EXPECT_NE(error_of([&] { fsdp::ulysses_size_wanted(args); }).find("model.use_remove_padding"), std::string::npos);
}

TEST(Ulysses, SizeThatDoesNotSplitTheHeadsIsRefusedByName) {
  auto a = models::builtin_args("qwen2-tiny");
  a.num_attention_heads = 12;
  a.num_key_value_heads = 8;
  models::CausalLM model(a, models::HeadKind::kLanguageModel);
  const std::string key = "engine.fsdp.ulysses_sequence_parallel_size";
  // 3 and 6 divide the 12 query heads but neither divide nor are a multiple of the 8 kv heads (verl's rule).
  const std::string error = error_of([&] { model.check_sequence_parallel(3, 12, key); });
  EXPECT_NE(error.find(key), std::string::npos) << error;
  EXPECT_NE(error.find("12 attention heads"), std::string::npos) << error;
  EXPECT_NE(error.find("(allowed: 1, 2, 4)"), std::string::npos) << error;
  EXPECT_EQ(error_of([&] { model.check_sequence_parallel(4, 12, key); }), "");
  EXPECT_EQ(models::allowed_sequence_parallel_sizes(4, 2, 8), (std::vector<int64_t>{1, 2, 4}));
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
