#pragma once
// What the Ulysses tests share (fsdp_ulysses_test.cpp on Gloo, fsdp_ulysses_gpu_test.cpp on NCCL): engines with
// and without [engine.<backend>] ulysses_sequence_parallel_size fed one global batch as verl feeds them (the ranks
// of a sequence group share their data-parallel rank's rows), and the comparison of every engine with the first.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {

struct Variant {
  std::string name;
  int64_t sp = 1;
  bool dynamic = false;
  bool checkpointing = false;
  bool value_model = false;  // verl's critic: the value head, value_loss; else the language head, loss_with_entropy
  int64_t fsdp_size = -1;     // HSDP below the world size: its gradient shards are not the first engine's, the norm
                              // and the parameters are compared
};

// How far an engine may be from the first (relative to the first's largest magnitude; params: absolute). Gradients
// are sums over every token in another order (heads exchanged, each rank's slice of the sequence): up to 1.4e-5 of
// the largest entry seen on an AVX-512 CPU, whose fp32 kernels round differently from AVX2's; a wrong exchange is
// off by the entry's size.
struct Tolerance {
  double loss = 1e-6, outputs = 1e-5, grads = 5e-5, norm = 1e-5, params = 1e-5;
};

// The engine's arguments on this rank: `setup` adapts them to the device (a CUDA test sets the device and group).
using ArgsSetup = std::function<void(EngineArgs&)>;

inline EngineArgs ulysses_args(const testing::RankContext& ctx, const std::string& model, const Variant& v,
                               const std::string& dtype, const ArgsSetup& setup) {
  auto a = make_args("fsdp2", dtype, ctx.rank, ctx.world_size, ctx.group, ctx.store);
  a.model.path = model;
  a.model.use_remove_padding = true;
  a.model.enable_gradient_checkpointing = v.checkpointing;
  a.optim.lr = 1e-3;
  a.engine.micro_batch_size_per_gpu = 2;
  a.engine.use_dynamic_bsz = v.dynamic;
  a.engine.max_token_len_per_gpu = 24;
  if (v.sp > 1) a.engine.backend_options[fsdp::kUlyssesSize] = int64_t{v.sp};
  if (v.value_model) a.model_type = "value_model";
  a.engine.fsdp_size = v.fsdp_size;
  if (setup) setup(a);
  return a;
}

// Rows of different lengths, left- and right-padded, every token of a row a target (position 0 never is).
inline Batch ragged_batch(int64_t rows, int64_t seq, uint64_t seed) {
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
inline LossResult loss_with_entropy(const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
  auto mask = mb.at("loss_mask").to(torch::kFloat);
  auto loss = (-(out.log_probs * mask).sum() + 0.1 * (out.entropy * mask).sum()) / ctx.global_num_tokens;
  return {loss, {}};
}

inline torch::Tensor all_gather(const testing::RankContext& ctx, const torch::Tensor& t) {
  std::vector<torch::Tensor> in{t.contiguous().cpu()};  // the group is Gloo's, whatever the engine's device
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < ctx.world_size; ++r) out[0].push_back(torch::empty_like(in[0]));
  ctx.group->allgather(out, in)->wait();
  return torch::stack(out[0]);
}

// The global batch's rows of output `name`: one rank of each sequence group, in data-parallel order. The other
// ranks of a group must hold the same rows.
inline torch::Tensor global_rows(const testing::RankContext& ctx, const BatchOutput& out, const std::string& name,
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

inline double max_rel_diff(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>() + 1e-12;
  return (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>() / scale;
}

inline void expect_variants_match_data_parallel(const testing::RankContext& ctx, const std::string& model,
                                                const std::vector<Variant>& variants, const std::string& dtype = "fp32",
                                                const Tolerance& tol = {}, const ArgsSetup& setup = {}) {
  std::vector<std::unique_ptr<fsdp::FSDPEngine>> engines;
  for (const auto& v : variants) {
    engines.push_back(std::make_unique<fsdp::FSDPEngine>(ulysses_args(ctx, model, v, dtype, setup)));
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
      outs.push_back(forward_backward_batch(*e, mine, variants[0].value_model ? LossFn(value_loss) : loss_with_entropy,
                                               /*forward_only=*/false));
      grads.push_back(e->local_parameters());
    }
    const std::string at = ", step " + std::to_string(step);
    if (step == 1) {  // infer_batch (eval mode, no grad: verl's log-prob pass) on the trained weights
      std::vector<BatchOutput> inferred;
      for (auto& e : engines) {
        inferred.push_back(infer_batch(*e, rank_slice(global, static_cast<int>(e->get_data_parallel_rank()),
                                                     static_cast<int>(e->get_data_parallel_size()))));
      }
      const std::string name = variants[0].value_model ? "values" : "log_probs";
      for (size_t i = 1; i < engines.size(); ++i) {
        EXPECT_LE(max_rel_diff(global_rows(ctx, inferred[i], name, variants[i].sp), global_rows(ctx, inferred[0], name, 1)),
                  tol.outputs)
            << variants[i].name << at << ": infer_batch " << name;
      }
    }
    // Each data-parallel rank reports its rows' share; a sequence group's ranks report it once each.
    const double base_loss = all_gather(ctx, outs[0].loss.reshape({1})).sum().item<double>();
    for (size_t i = 1; i < engines.size(); ++i) {
      const auto& v = variants[i];
      const double loss = all_gather(ctx, outs[i].loss.reshape({1})).sum().item<double>() / v.sp;
      EXPECT_NEAR(loss, base_loss, tol.loss * std::abs(base_loss)) << v.name << at;
      const auto names = variants[0].value_model ? std::vector<std::string>{"values"}
                                                 : std::vector<std::string>{"log_probs", "entropy"};
      for (const std::string& name : names) {
        const double diff = max_rel_diff(global_rows(ctx, outs[i], name, v.sp), global_rows(ctx, outs[0], name, 1));
        EXPECT_LE(diff, tol.outputs) << v.name << at << ": " << name;
      }
      ASSERT_EQ(grads[i].size(), grads[0].size());
      for (size_t p = 0; p < grads[0].size(); ++p) {
        if (!grads[0][p].grad.defined() || grads[0][p].grad.numel() == 0) continue;
        if (grads[i][p].flat_offset != grads[0][p].flat_offset || grads[i][p].param.numel() != grads[0][p].param.numel()) {
          continue;  // another shard layout (HSDP)
        }
        ASSERT_TRUE(grads[i][p].grad.defined()) << v.name << at << ": " << grads[0][p].name;
        EXPECT_LE(max_rel_diff(grads[i][p].grad, grads[0][p].grad), tol.grads) << v.name << at << ": "
                                                                           << grads[0][p].name << " gradient";
      }
    }
    const double base_norm = engines[0]->optimizer_step().item<double>();
    engines[0]->lr_scheduler_step();
    for (size_t i = 1; i < engines.size(); ++i) {
      EXPECT_NEAR(engines[i]->optimizer_step().item<double>(), base_norm, tol.norm * base_norm) << variants[i].name << at;
      engines[i]->lr_scheduler_step();
    }
  }
  const auto base = engine_params(*engines[0]);
  for (size_t i = 1; i < engines.size(); ++i) {
    for (const auto& [name, value] : engine_params(*engines[i])) {
      EXPECT_LE((value - base.at(name)).abs().max().item<double>(), tol.params) << variants[i].name << ": " << name;
    }
  }
}

}  // namespace fsdp_test
}  // namespace enginery
