// score_sequences (behind `enginery logprobs`): batching and padding do not change the results; layout and order.
#include <gtest/gtest.h>

#include "models/model_factory.h"
#include "models/sequence_scores.h"

namespace enginery {
namespace models {
namespace {

TEST(SequenceScores, BatchingDoesNotChangeResultsAndKeepsOrder) {
  ModelConfig cfg;
  cfg.path = "builtin:llama-tiny";
  auto model = build_model(cfg, "language_model");
  std::vector<std::vector<int64_t>> tokens = {{5, 9, 200, 3}, {7}, {}, {1, 2}, {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 8}};
  auto one_by_one = score_sequences(*model, tokens, {torch::kCPU, c10::kFloat, 1});
  auto batched = score_sequences(*model, tokens, {torch::kCPU, c10::kFloat, 1 << 20});
  ASSERT_EQ(batched.log_probs.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const size_t want = tokens[i].size() < 2 ? 0 : tokens[i].size() - 1;
    ASSERT_EQ(batched.log_probs[i].size(), want) << i;
    ASSERT_EQ(batched.entropy[i].size(), want) << i;
    for (size_t t = 0; t < want; ++t) {
      EXPECT_NEAR(batched.log_probs[i][t], one_by_one.log_probs[i][t], 1e-5) << i << " " << t;
      EXPECT_NEAR(batched.entropy[i][t], one_by_one.entropy[i][t], 1e-5) << i << " " << t;
      EXPECT_LT(batched.log_probs[i][t], 0.0);
      EXPECT_GT(batched.entropy[i][t], 0.0);
    }
  }
  // Sequence 3 is the prefix-free pair {1, 2}: its single value is log p(2 | 1) computed alone.
  auto alone = score_sequences(*model, {{1, 2}});
  EXPECT_NEAR(alone.log_probs[0][0], batched.log_probs[3][0], 1e-5);
}

TEST(SequenceScores, Bf16AutocastStaysCloseToFp32) {
  ModelConfig cfg;
  cfg.path = "builtin:qwen2-tiny";
  auto model = build_model(cfg, "language_model");
  std::vector<std::vector<int64_t>> tokens = {{5, 9, 200, 3, 17, 250}, {7, 1, 2}};
  auto fp32 = score_sequences(*model, tokens);
  auto bf16 = score_sequences(*model, tokens, {torch::kCPU, c10::kBFloat16, 8192});
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (size_t t = 0; t < fp32.log_probs[i].size(); ++t) {
      EXPECT_NEAR(bf16.log_probs[i][t], fp32.log_probs[i][t], 0.05);
    }
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
