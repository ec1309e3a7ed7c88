// model.use_remove_padding on the CPU: the packing bookkeeping, and packed against padded on the same batches
// (outputs, loss and every gradient within 1e-5 relative, fp32) for every built-in architecture, both heads,
// left / right / no padding, a sequence of one token, one sequence alone, an empty row and a mask with a hole.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "models/model_factory.h"
#include "models/packed_sequences.h"
#include "packed_compare.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

constexpr double kFp32Tol = 1e-5;

using testing::builtin;

// Rows of `lengths` real tokens; `left` rows are left padded, the others right padded.
ModelInputs ragged(const std::vector<int64_t>& lengths, const std::vector<bool>& left, int64_t seq_len) {
  torch::manual_seed(11);
  const int64_t b = static_cast<int64_t>(lengths.size());
  auto ids = torch::randint(0, 256, {b, seq_len}, torch::kLong);
  auto mask = torch::zeros({b, seq_len}, torch::kLong);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t start = left[i] ? seq_len - lengths[i] : 0;
    mask[i].narrow(0, start, lengths[i]).fill_(1);
  }
  return {ids, mask, torch::Tensor()};
}

void expect_packed_matches_padded(CausalLM& model, const ModelInputs& in, const std::string& what) {
  const auto c = testing::compare_packed_with_padded(model, in);
  EXPECT_LT(c.outputs, kFp32Tol) << what;
  EXPECT_LT(c.loss, kFp32Tol) << what;
  EXPECT_LT(c.grads, kFp32Tol) << what << ", worst gradient " << c.worst_grad;
  EXPECT_EQ(c.grads_compared, model.named_parameters().size()) << what;
}

TEST(PackSequences, IndexLengthsAndPositionsOfLeftAndRightPaddedRows) {
  auto in = ragged({3, 0, 2, 4}, {true, false, false, false}, 4);
  auto valid = in.attention_mask.to(torch::kBool);
  auto positions = (in.attention_mask.cumsum(-1) - 1).clamp_min(0);
  const PackedBatch p = pack_batch(valid, in.input_ids, positions);
  // Row 0 left padded (positions 1..3), row 1 empty (no sequence), row 2 right padded, row 3 full.
  EXPECT_EQ(p.sequences.offsets, (std::vector<int64_t>{0, 3, 5, 9}));
  EXPECT_EQ(p.sequences.max_len, 4);
  EXPECT_TRUE(torch::equal(p.sequences.cu_seqlens, torch::tensor({0, 3, 5, 9}, torch::kInt)));
  EXPECT_TRUE(torch::equal(p.index, torch::tensor({1, 2, 3, 8, 9, 12, 13, 14, 15}, torch::kLong)));
  EXPECT_TRUE(torch::equal(p.position_ids[0], torch::tensor({0, 1, 2, 0, 1, 0, 1, 2, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(p.input_ids[0], in.input_ids.reshape({-1}).index_select(0, p.index)));
  // Pairs stay inside a sequence: none from the last token of one row to the first of the next.
  const PackedPairs pairs = packed_pairs(p, 4);
  EXPECT_TRUE(torch::equal(pairs.rows, torch::tensor({0, 1, 3, 5, 6, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(pairs.targets, torch::tensor({2, 3, 9, 13, 14, 15}, torch::kLong)));
}

TEST(PackSequences, AllPaddingCannotBePacked) {
  auto valid = torch::zeros({2, 3}, torch::kBool);
  auto ids = torch::zeros({2, 3}, torch::kLong);
  EXPECT_THROW(pack_batch(valid, ids, ids), EngineryError);
}

TEST(PackedForward, MatchesPaddedForEveryArchitectureAndPadding) {
  for (const char* name : {"qwen2-tiny", "llama-tiny", "qwen3-tiny"}) {
    auto model = builtin(name);
    expect_packed_matches_padded(*model, ragged({9, 5, 1, 7}, {false, true, false, true}, 9),
                                 std::string(name) + " mixed, a one-token sequence");
    expect_packed_matches_padded(*model, ragged({6, 3}, {true, true}, 8), std::string(name) + " left padded");
    expect_packed_matches_padded(*model, ragged({2, 8, 4}, {false, false, false}, 8),
                                 std::string(name) + " right padded");
  }
}

TEST(PackedForward, OneSequenceAnEmptyRowAndNoPadding) {
  auto model = builtin("qwen3-tiny");
  expect_packed_matches_padded(*model, ragged({5}, {true}, 8), "one sequence alone");
  expect_packed_matches_padded(*model, ragged({4, 0, 6}, {false, false, true}, 7), "a row without tokens");
  expect_packed_matches_padded(*model, ragged({6, 6}, {false, false}, 6), "no padding (runs dense)");
}

TEST(PackedForward, MaskWithAHoleGivesThePaddedResult) {
  auto model = builtin("llama-tiny");
  auto in = ragged({8, 6}, {false, true}, 8);
  in.attention_mask[0][3] = 0;  // the padded path excludes this key and computes no pair across it
  expect_packed_matches_padded(*model, in, "hole in row 0");
}

TEST(PackedForward, ValueHeadAndGradientCheckpointing) {
  expect_packed_matches_padded(*builtin("qwen2-tiny", "value_model"), ragged({7, 2, 5}, {true, false, false}, 7),
                               "value head");
  expect_packed_matches_padded(*builtin("llama-tiny", "language_model", /*checkpointing=*/true),
                               ragged({7, 2, 5}, {true, false, false}, 7), "checkpointed layers");
}

TEST(PackedForward, AttentionNeverCrossesSequences) {
  auto model = builtin("qwen2-tiny");
  torch::NoGradGuard no_grad;
  auto in = ragged({5, 6}, {false, true}, 6);
  in.remove_padding = true;
  HeadOptions head;
  auto before = model->forward(in, head, nullptr).log_probs;
  in.input_ids[0].narrow(0, 0, 5).random_(0, 256);  // a different first sequence, same lengths
  auto after = model->forward(in, head, nullptr).log_probs;
  EXPECT_LT((before[1] - after[1]).abs().max().item<double>(), 1e-6);
  EXPECT_GT((before[0] - after[0]).abs().max().item<double>(), 1e-3);
}

}  // namespace
}  // namespace models
}  // namespace enginery
