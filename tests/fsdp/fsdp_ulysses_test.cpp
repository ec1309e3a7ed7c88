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
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"

namespace enginery {
namespace fsdp_test {
namespace {

struct Variant {
  std::string name;
  int64_t sp = 1;
  bool dynamic = false;
  bool checkpointing = false;
};

EngineArgs ulysses_args(const testing::RankContext& ctx, const std::string& model, const Variant& v) {
  auto a = make_args("fsdp2", "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
  a.model.path = model;
  a.model.use_remove_padding = true;
  a.model.enable_gradient_checkpointing = v.checkpointing;
  a.optim.lr = 1e-3;
  a.engine.micro_batch_size_per_gpu = 2;
  a.engine.use_dynamic_bsz = v.dynamic;
  a.engine.max_token_len_per_gpu = 24;
  if (v.sp > 1) a.engine.backend_options[fsdp::kUlyssesSize] = std::to_string(v.sp);
  return a;
}

// Rows of different lengths, left- and right-padded, every token of a row a target (position 0 never is).
Batch ragged_batch(int64_t rows, int64_t seq, uint64_t seed) {
  Batch b = make_batch(rows, seq, 256, seed);
  auto mask = torch::zeros({rows, seq}, torch::kLong);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t length = 1 + static_cast<int64_t>((seed * 7 + static_cast<uint64_t>(r) * 5) % seq);
    mask[r].narrow(0, r % 2 ? seq - length : 0, length).fill_(1);
  }
  b.set("attention_mask", mask);
  b.set("loss_mask", mask.clone());
  b.set_meta("calculate_entropy", true);
  return b;
}

// The SFT loss plus a small entropy term, so that the entropy's gathered outputs carry gradients too.
LossResult loss_with_entropy(const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
  auto mask = mb.at("loss_mask").to(torch::kFloat);
  auto loss = (-(out.log_probs * mask).sum() + 0.1 * (out.entropy * mask).sum()) / ctx.global_num_tokens;
  return {loss, {}};
}

torch::Tensor all_gather(const testing::RankContext& ctx, const torch::Tensor& t) {
  std::vector<torch::Tensor> in{t.contiguous()};
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < ctx.world_size; ++r) out[0].push_back(torch::empty_like(in[0]));
  ctx.group->allgather(out, in)->wait();
  return torch::stack(out[0]);
}

// The global batch's rows of output `name`: one rank of each sequence group, in data-parallel order. The other
// ranks of a group must hold the same rows.
torch::Tensor global_rows(const testing::RankContext& ctx, const BatchOutput& out, const std::string& name,
                          int64_t sp) {
  auto all = all_gather(ctx, out.outputs.at(name));  // [world, rows per rank, seq]
  std::vector<torch::Tensor> rows;
  for (int64_t first = 0; first < ctx.world_size; first += sp) {
    for (int64_t j = 1; j < sp; ++j) {
      EXPECT_TRUE(torch::equal(all[first + j], all[first])) << name << ": ranks " << first << " and " << first + j
                                                            << " of one sequence group returned different rows";
    }
    rows.push_back(all[first]);
  }
  return torch::cat(rows);
}

double max_rel_diff(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>() + 1e-12;
  return (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>() / scale;
}

void expect_variants_match_data_parallel(const testing::RankContext& ctx, const std::string& model,
                                         const std::vector<Variant>& variants) {
  std::vector<std::unique_ptr<fsdp::FSDPEngine>> engines;
  for (const auto& v : variants) {
    engines.push_back(std::make_unique<fsdp::FSDPEngine>(ulysses_args(ctx, model, v)));
    engines.back()->initialize();
    ASSERT_EQ(engines.back()->get_data_parallel_size(), ctx.world_size / v.sp) << v.name;
  }
  for (int step = 0; step < 2; ++step) {
    const Batch global = ragged_batch(8, 16, 900 + step);
    std::vector<BatchOutput> outs;
    std::vector<std::vector<LocalParameter>> grads;
    for (auto& e : engines) {
      e->optimizer_zero_grad();
      const Batch mine = rank_slice(global, static_cast<int>(e->get_data_parallel_rank()),
                                    static_cast<int>(e->get_data_parallel_size()));
      outs.push_back(e->forward_backward_batch(mine, loss_with_entropy, /*forward_only=*/false));
      grads.push_back(e->local_parameters());
    }
    const std::string at = ", step " + std::to_string(step);
    // Each data-parallel rank reports its rows' share; a sequence group's ranks report it once each.
    const double base_loss = all_gather(ctx, outs[0].loss.reshape({1})).sum().item<double>();
    for (size_t i = 1; i < engines.size(); ++i) {
      const auto& v = variants[i];
      const double loss = all_gather(ctx, outs[i].loss.reshape({1})).sum().item<double>() / v.sp;
      EXPECT_NEAR(loss, base_loss, 1e-6 * std::abs(base_loss)) << v.name << at;
      for (const std::string name : {"log_probs", "entropy"}) {
        const double diff = max_rel_diff(global_rows(ctx, outs[i], name, v.sp), global_rows(ctx, outs[0], name, 1));
        EXPECT_LE(diff, 1e-5) << v.name << at << ": " << name;
      }
      ASSERT_EQ(grads[i].size(), grads[0].size());
      for (size_t p = 0; p < grads[0].size(); ++p) {
        if (!grads[0][p].grad.defined() || grads[0][p].grad.numel() == 0) continue;
        ASSERT_TRUE(grads[i][p].grad.defined()) << v.name << at << ": " << grads[0][p].name;
        EXPECT_LE(max_rel_diff(grads[i][p].grad, grads[0][p].grad), 1e-5) << v.name << at << ": "
                                                                           << grads[0][p].name << " gradient";
      }
    }
    const double base_norm = engines[0]->optimizer_step().item<double>();
    engines[0]->lr_scheduler_step();
    for (size_t i = 1; i < engines.size(); ++i) {
      EXPECT_NEAR(engines[i]->optimizer_step().item<double>(), base_norm, 1e-5 * base_norm) << variants[i].name << at;
      engines[i]->lr_scheduler_step();
    }
  }
  const auto base = engine_params(*engines[0]);
  for (size_t i = 1; i < engines.size(); ++i) {
    for (const auto& [name, value] : engine_params(*engines[i])) {
      EXPECT_LE((value - base.at(name)).abs().max().item<double>(), 1e-5) << variants[i].name << ": " << name;
    }
  }
}

// qwen3 (q/k norms, head_dim != hidden / heads; 4 query and 2 kv heads: one kv head per rank).
TEST(Ulysses, TwoWayMatchesDataParallelOnTwoRanks) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    expect_variants_match_data_parallel(ctx, "builtin:qwen3-tiny",
                                        {{"sp 1"}, {"sp 2", 2}, {"sp 2, dynamic", 2, true},
                                         {"sp 2, checkpointing", 2, false, true}});
  });
}

// qwen2 (tied embeddings, biases): sp 2 with 2 data-parallel groups, and sp 4, where its 2 kv heads are repeated
// so that each rank gets the one its query head reads.
TEST(Ulysses, TwoAndFourWayMatchDataParallelOnFourRanks) {
  testing::run_ranks(4, [](const testing::RankContext& ctx) {
    expect_variants_match_data_parallel(ctx, "builtin:qwen2-tiny", {{"sp 1"}, {"sp 2", 2}, {"sp 4", 4}});
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
