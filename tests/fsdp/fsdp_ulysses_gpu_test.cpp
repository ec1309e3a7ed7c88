// Ulysses sequence parallelism on 2 GPUs over NCCL (label gpu; skips without 2 CUDA devices or NCCL): the engine
// with ulysses_sequence_parallel_size = 2 against the one without it on the same global batch, in fp32 (CUDA's
// per-sequence attention; loss, outputs, gradient shards, norm, parameters within GPU reduction-order noise) and in
// bf16 (aten's varlen flash kernel over the head-sharded tokens, its padding sequence included; within bf16
// rounding).
#include <gtest/gtest.h>

#include "tests/fsdp/ulysses_test_util.h"

namespace enginery {
namespace fsdp_test {
namespace {

bool have_two_gpus() { return torch::cuda::is_available() && torch::cuda::device_count() >= 2 && compat::has_nccl(); }

// The engine on cuda:<rank> over an NCCL world group of its own (the rank's Gloo group stays for the test's gathers).
ArgsSetup on_cuda(const testing::RankContext& ctx) {
  auto store = c10::make_intrusive<c10d::PrefixStore>("nccl", ctx.store);
  auto group = compat::make_nccl_group(store, ctx.rank, ctx.world_size);
  return [ctx, group](EngineArgs& a) {
    a.device = "cuda";
    a.local_rank = ctx.rank;
    a.world_group = group;
  };
}

const std::vector<Variant> kVariants = {{"sp 1"}, {"sp 2", 2}, {"sp 2, dynamic", 2, true}};

TEST(UlyssesGpu, TwoWayMatchesDataParallelInFp32) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs 2 CUDA devices and NCCL";
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    Tolerance tol;
    tol.loss = 1e-5;
    tol.outputs = tol.grads = tol.norm = 1e-4;
    tol.params = 1e-4;
    expect_variants_match_data_parallel(ctx, "builtin:qwen3-tiny", kVariants, "fp32", tol, on_cuda(ctx));
  });
}

TEST(UlyssesGpu, TwoWayMatchesDataParallelInBf16) {
  if (!have_two_gpus()) GTEST_SKIP() << "needs 2 CUDA devices and NCCL";
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    Tolerance tol;  // bf16 (8 bits of mantissa) in both; different summation orders
    tol.loss = 1e-2;
    tol.outputs = 5e-2;
    tol.grads = 1e9;  // per-element bf16 gradients are compared through the norm and the parameters instead
    tol.norm = 3e-2;
    tol.params = 5e-3;  // two AdamW steps of lr 1e-3
    expect_variants_match_data_parallel(ctx, "builtin:qwen3-tiny", kVariants, "bf16", tol, on_cuda(ctx));
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
