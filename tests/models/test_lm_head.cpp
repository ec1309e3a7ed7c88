// The chunked log-prob / entropy head equals the plain full-logits computation, in values and gradients.
#include <gtest/gtest.h>

#include "test_util.h"
#include "models/lm_head.h"

namespace enginery {
namespace models {
namespace {

struct Problem {
  torch::Tensor hidden, weight, targets, w_lp, w_ent;
};

Problem make_problem(int64_t n, int64_t h, int64_t v, torch::Dtype dtype) {
  torch::manual_seed(1234);
  Problem p;
  p.hidden = torch::randn({n, h}, torch::kDouble).to(dtype).requires_grad_(true);
  p.weight = (torch::randn({v, h}, torch::kDouble) * 0.7).to(dtype).requires_grad_(true);
  p.targets = torch::randint(0, v, {n}, torch::kLong);
  p.w_lp = torch::randn({n}, torch::kFloat);
  p.w_ent = torch::randn({n}, torch::kFloat);
  return p;
}

// d/d(hidden, weight) of sum(w_lp * log_probs) + sum(w_ent * entropy).
std::pair<torch::Tensor, torch::Tensor> grads(const Problem& p, const TokenLogProbs& r) {
  auto loss = (r.log_probs * p.w_lp).sum();
  if (r.entropy.defined()) loss = loss + (r.entropy * p.w_ent).sum();
  auto g = torch::autograd::grad({loss}, {p.hidden, p.weight});
  return {g[0], g[1]};
}

using testing::max_diff;

TEST(ChunkedLogProbs, EqualsFullLogitsInFloat64ForAnyChunking) {
  auto p = make_problem(37, 16, 50, torch::kDouble);
  auto full = full_log_probs(p.hidden, p.weight, p.targets, true, torch::kDouble);
  auto [gh_full, gw_full] = grads(p, full);
  for (int64_t chunk : {1, 5, 36, 37, 100}) {
    auto c = chunked_log_probs(p.hidden, p.weight, p.targets, true, torch::kDouble, chunk);
    // The chunked head returns fp32 per the model contract; compare at fp32 resolution.
    EXPECT_LT(max_diff(c.log_probs, full.log_probs), 1e-5) << chunk;
    EXPECT_LT(max_diff(c.entropy, full.entropy), 1e-5) << chunk;
    auto [gh, gw] = grads(p, c);
    EXPECT_EQ(gh.scalar_type(), torch::kDouble);
    EXPECT_LT(max_diff(gh, gh_full), 1e-5) << chunk;
    EXPECT_LT(max_diff(gw, gw_full), 1e-5) << chunk;
  }
}

TEST(ChunkedLogProbs, Fp32MatchesFloat64Reference) {
  auto p64 = make_problem(64, 32, 97, torch::kDouble);
  auto p32 = make_problem(64, 32, 97, torch::kFloat);
  auto ref = full_log_probs(p64.hidden, p64.weight, p64.targets, true, torch::kDouble);
  auto [gh_ref, gw_ref] = grads(p64, ref);
  auto c = chunked_log_probs(p32.hidden, p32.weight, p32.targets, true, torch::kFloat, 9);
  EXPECT_LT(max_diff(c.log_probs, ref.log_probs), 1e-4);
  EXPECT_LT(max_diff(c.entropy, ref.entropy), 1e-4);
  auto [gh, gw] = grads(p32, c);
  EXPECT_LT(max_diff(gh, gh_ref), 1e-4);
  EXPECT_LT(max_diff(gw, gw_ref), 1e-4);
}

TEST(ChunkedLogProbs, WithoutEntropyOnlyLogProbsFlow) {
  auto p = make_problem(20, 8, 30, torch::kDouble);
  auto full = full_log_probs(p.hidden, p.weight, p.targets, false, torch::kDouble);
  auto c = chunked_log_probs(p.hidden, p.weight, p.targets, false, torch::kDouble, 6);
  EXPECT_FALSE(c.entropy.defined());
  auto [gh_full, gw_full] = grads(p, full);
  auto [gh, gw] = grads(p, c);
  EXPECT_LT(max_diff(gh, gh_full), 1e-5);
  EXPECT_LT(max_diff(gw, gw_full), 1e-5);
}

TEST(ChunkedLogProbs, Bf16ComputeMatchesFullBf16Compute) {
  auto p = make_problem(48, 32, 64, torch::kFloat);
  auto full = full_log_probs(p.hidden, p.weight, p.targets, true, torch::kBFloat16);
  auto c = chunked_log_probs(p.hidden, p.weight, p.targets, true, torch::kBFloat16, 10);
  EXPECT_LT(max_diff(c.log_probs, full.log_probs), 1e-3);
  EXPECT_LT(max_diff(c.entropy, full.entropy), 1e-3);
  // Gradients keep the parameter dtypes.
  auto [gh, gw] = grads(p, c);
  EXPECT_EQ(gh.scalar_type(), torch::kFloat);
  EXPECT_EQ(gw.scalar_type(), torch::kFloat);
  auto [gh_full, gw_full] = grads(p, full);
  EXPECT_LT(max_diff(gw, gw_full) / gw_full.abs().max().item<double>(), 2e-2);
}

TEST(ChunkedLogProbs, DefaultChunkKeepsLogitsNear64MiB) {
  EXPECT_EQ(default_chunk_rows(151936) * 151936 * 4 <= (64ll << 20), true);
  EXPECT_GT(default_chunk_rows(151936), 50);
  EXPECT_EQ(default_chunk_rows(1ll << 40), 1);
}

}  // namespace
}  // namespace models
}  // namespace enginery
