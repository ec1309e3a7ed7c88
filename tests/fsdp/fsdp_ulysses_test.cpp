// Ulysses sequence parallelism ([engine.<backend>] ulysses_sequence_parallel_size; docs/ARCHITECTURE.md,
// "Sequence parallelism") over real Gloo ranks: engines with a sequence-parallel size s > 1, fed the same global
// batch as verl feeds them (the ranks of a sequence group share their data-parallel rank's rows), equal the engine
// without it in fp32: the global loss, every output row, this rank's gradient shards (the same FSDP layout over the
// world), the grad norm and the parameters after two steps. Packed micro-batches, fixed and dynamic, and activation
// checkpointing (its recompute exchanges heads again in backward).
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/model_args.h"
#include "models/sequence_parallel.h"
#include "tests/fsdp/ulysses_test_util.h"
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
    Tolerance tol;
    tol.grads = 5e-5;  // score.bias's gradient is one sum over every token, with cancellation: fp32 summation order
    expect_variants_match_data_parallel(ctx, "builtin:llama-tiny", {one, two}, "fp32", tol);
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

TEST(Ulysses, SizeThatDoesNotDivideTheWorldIsRefusedByName) {
  EngineArgs args;
  args.world_size = 4;
  args.engine.strategy = "fsdp2";
  args.model.use_remove_padding = true;
  args.engine.backend_options[fsdp::kUlyssesSize] = "3";
  const std::string error = error_of([&] { fsdp::ulysses_size_wanted(args); });
  EXPECT_NE(error.find("engine.fsdp2.ulysses_sequence_parallel_size"), std::string::npos) << error;
  EXPECT_NE(error.find("(allowed: 1, 2, 4)"), std::string::npos) << error;
  args.engine.backend_options[fsdp::kUlyssesSize] = "two";
  EXPECT_NE(error_of([&] { fsdp::ulysses_size_wanted(args); }).find("(allowed: 1, 2, 4)"), std::string::npos);
  args.engine.backend_options[fsdp::kUlyssesSize] = "2";
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
