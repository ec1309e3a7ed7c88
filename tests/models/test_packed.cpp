// model.use_remove_padding on the CPU: the packing bookkeeping, and packed against padded on the same batches
// (outputs, loss and every gradient within 1e-5 relative, fp32) for every built-in architecture, both heads,
// left / right / no padding, a sequence of one token, one sequence alone, an empty row and a mask with a hole.
// A packed input (cu_seqlens, host_api/batch.h's [Note: packed batch]) against the same sequences as a padded input
// through the padded path, mapped by hand to verl's alignment: outputs, loss and every gradient, model.
// use_remove_padding on and off, with an empty sequence and sequences of one token.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <map>

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
using testing::packed_input;

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
  EXPECT_TRUE(torch::equal(p.pair_rows, torch::tensor({0, 1, 3, 5, 6, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(p.index.index_select(0, p.pair_rows + 1), torch::tensor({2, 3, 9, 13, 14, 15}, torch::kLong)));
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.seq_len, 4);
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

TEST(PackSequences, LayoutPairsAndPositionsOfAPackedInput) {
  auto in = packed_input({{5, 6, 7}, {}, {8}, {9, 10, 11, 12}});
  const PackedBatch p = pack_sequences(in.input_ids, in.cu_seqlens, torch::Tensor());
  EXPECT_EQ(p.sequences.offsets, (std::vector<int64_t>{0, 3, 4, 8}));  // the empty sequence is no kernel sequence
  EXPECT_EQ(p.sequences.max_len, 4);
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.seq_len, 4);
  EXPECT_TRUE(torch::equal(p.index, torch::tensor({0, 1, 2, 8, 12, 13, 14, 15}, torch::kLong)));
  EXPECT_TRUE(torch::equal(p.pair_rows, torch::tensor({0, 1, 4, 5, 6}, torch::kLong)));
  EXPECT_TRUE(torch::equal(p.position_ids[0], torch::tensor({0, 1, 2, 0, 0, 1, 2, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(p.input_ids[0], in.input_ids));
  // verl's alignment <-> the right-padded [4, 4] layout: log_probs[i] (token i + 1) sits at token i + 1's place.
  auto lp = torch::arange(1, 9, torch::kDouble);
  auto padded = next_token_to_padded(lp, p);
  EXPECT_TRUE(torch::equal(padded, torch::tensor({0., 1., 2., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 5., 6., 7.},
                                                 torch::kDouble)
                                       .view({4, 4})));
  EXPECT_TRUE(torch::equal(next_token_from_padded(padded, p),
                           torch::tensor({1., 2., 0., 0., 5., 6., 7., 0.}, torch::kDouble)));
  EXPECT_TRUE(torch::equal(from_padded(to_padded(lp, p), p), lp));
}

TEST(PackSequences, PackedInputThatDoesNotFitIsRefusedByName) {
  auto in = packed_input({{1, 2, 3}, {4}});
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const EngineryError& e) {
      return e.what();
    }
    return "";
  };
  const auto ids = in.input_ids;
  EXPECT_NE(error_of([&] { pack_sequences(ids, torch::tensor({0, 3, 5}, torch::kLong), {}); }).find("cu_seqlens"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pack_sequences(ids, torch::tensor({1, 3, 4}, torch::kLong), {}); }).find("cu_seqlens"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pack_sequences(ids, torch::tensor({0, 3, 2, 4}, torch::kLong), {}); }).find("cu_seqlens"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pack_sequences(ids.view({2, 2}), in.cu_seqlens, {}); }).find("input_ids"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pack_sequences(ids, in.cu_seqlens, torch::zeros({3}, torch::kLong)); }).find("position_ids"),
            std::string::npos);
}

// The sequences of `in` (a packed input) right padded to [S, longest] with a filler that is a real id.
ModelInputs padded_of(const std::vector<std::vector<int64_t>>& seqs) {
  int64_t t = 1;
  for (const auto& s : seqs) t = std::max<int64_t>(t, s.size());
  const int64_t b = static_cast<int64_t>(seqs.size());
  ModelInputs in;
  in.input_ids = torch::full({b, t}, 3, torch::kLong);
  in.attention_mask = torch::zeros({b, t}, torch::kLong);
  for (int64_t i = 0; i < b; ++i) {
    for (size_t k = 0; k < seqs[i].size(); ++k) in.input_ids[i][static_cast<int64_t>(k)] = seqs[i][k];
    in.attention_mask[i].narrow(0, 0, static_cast<int64_t>(seqs[i].size())).fill_(1);
  }
  return in;
}

std::vector<std::vector<int64_t>> random_sequences(const std::vector<int64_t>& lengths, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::vector<int64_t>> out;
  for (int64_t len : lengths) {
    auto t = torch::randint(0, 256, {len}, torch::kLong);
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
  }
  return out;
}

struct Run {
  ModelOutput out;
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;
};

// A forward and a backward of a loss weighing every token differently. `weights` [N] per packed token; for the
// padded input the same weight goes where the mapping puts that token's output.
Run run(CausalLM& model, const ModelInputs& in, const torch::Tensor& weights, double temperature) {
  model.zero_grad();
  HeadOptions head;
  head.compute_entropy = model.head_kind() == HeadKind::kLanguageModel;
  head.temperature = temperature;
  Run r;
  r.out = model.forward(in, head, nullptr);
  r.loss = r.out.values.defined() ? (r.out.values * weights).sum()
                                  : (r.out.log_probs * weights).sum() + 0.3 * (r.out.entropy * weights).sum();
  r.loss.backward();
  for (auto& p : model.named_parameters()) {
    if (p.value().grad().defined()) r.grads[p.key()] = p.value().grad().clone();
  }
  return r;
}

// Packed input against the padded input through the padded path (remove_padding off), mapped by hand: a token's
// value at its place, a token's next-token log-prob / entropy at the next token's place, 0 at a sequence's last.
void expect_packed_input_matches_padded(CausalLM& model, const std::vector<std::vector<int64_t>>& seqs,
                                        bool remove_padding, const std::string& what, double temperature = 1.0) {
  SCOPED_TRACE(what + (remove_padding ? ", remove_padding on" : ", remove_padding off"));
  const bool values = model.head_kind() == HeadKind::kValue;
  ModelInputs packed = packed_input(seqs);
  packed.remove_padding = remove_padding;
  const ModelInputs padded = padded_of(seqs);
  const int64_t n = packed.input_ids.size(0);
  auto w_packed = torch::arange(n, torch::kFloat).remainder(7).add(1) / 7.0;
  auto w_padded = torch::zeros(padded.input_ids.sizes(), torch::kFloat);
  std::vector<std::array<int64_t, 3>> places;  // packed index, padded row, padded column
  int64_t i = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t len = static_cast<int64_t>(seqs[s].size());
    for (int64_t k = 0; k < len; ++k, ++i) {
      const int64_t col = values ? k : k + 1;
      if (col < len) {
        places.push_back({i, static_cast<int64_t>(s), col});
        w_padded[s][col] = w_packed[i];
      }
    }
  }
  const Run a = run(model, packed, w_packed, temperature);
  const Run b = run(model, padded, w_padded, temperature);
  const std::vector<std::pair<torch::Tensor, torch::Tensor>> outputs =
      values ? std::vector<std::pair<torch::Tensor, torch::Tensor>>{{a.out.values, b.out.values}}
             : std::vector<std::pair<torch::Tensor, torch::Tensor>>{{a.out.log_probs, b.out.log_probs},
                                                                   {a.out.entropy, b.out.entropy}};
  for (const auto& [got, want] : outputs) {
    ASSERT_EQ(got.sizes(), (std::vector<int64_t>{n}));
    auto expected = torch::zeros({n}, torch::kFloat);  // 0 where no place: a sequence's last token
    for (const auto& [at, row, col] : places) expected[at] = want[row][col];
    EXPECT_LT(testing::relative_error(got, expected), kFp32Tol);
    auto without = torch::ones({n}, torch::kBool);
    for (const auto& p : places) without[p[0]] = false;
    EXPECT_EQ(got.masked_select(without).abs().sum().item<double>(), 0.0);
  }
  EXPECT_LT(testing::relative_error(a.loss, b.loss), kFp32Tol);
  EXPECT_EQ(a.grads.size(), model.named_parameters().size());
  EXPECT_EQ(a.grads.size(), b.grads.size());
  for (const auto& [name, g] : b.grads) {
    ASSERT_TRUE(a.grads.count(name)) << name;
    EXPECT_LT(testing::relative_error(a.grads.at(name), g), kFp32Tol) << name;
  }
}

TEST(PackedInput, MatchesThePaddedPathForEveryArchitecture) {
  const auto seqs = random_sequences({6, 0, 1, 9, 3, 1}, 5);  // an empty sequence, sequences of one token
  for (const char* name : {"qwen2-tiny", "llama-tiny", "qwen3-tiny"}) {
    auto model = builtin(name);
    for (bool remove_padding : {true, false}) {
      expect_packed_input_matches_padded(*model, seqs, remove_padding, name);
    }
  }
}

TEST(PackedInput, ValueHeadCheckpointingTemperatureAndEqualLengths) {
  const auto seqs = random_sequences({4, 7, 0, 1, 5}, 6);
  for (bool remove_padding : {true, false}) {
    expect_packed_input_matches_padded(*builtin("qwen2-tiny", "value_model"), seqs, remove_padding, "value head");
    expect_packed_input_matches_padded(*builtin("llama-tiny", "language_model", /*checkpointing=*/true), seqs,
                                       remove_padding, "checkpointed layers");
    expect_packed_input_matches_padded(*builtin("qwen3-tiny"), seqs, remove_padding, "temperature 0.7", 0.7);
    // No padding at all (the padded path runs dense), and every sequence one token long (no pair to compute).
    expect_packed_input_matches_padded(*builtin("qwen3-tiny"), random_sequences({5, 5}, 7), remove_padding,
                                       "equal lengths");
    expect_packed_input_matches_padded(*builtin("qwen2-tiny", "value_model"), random_sequences({1, 1, 1}, 8),
                                       remove_padding, "one token each, values");
  }
}

TEST(PackedInput, OneTokenSequencesAndNoTokensGiveZerosAndEmptyOutputs) {
  auto model = builtin("qwen3-tiny");
  HeadOptions head;
  head.compute_entropy = true;
  for (bool remove_padding : {true, false}) {
    auto ones = packed_input({{4}, {}, {9}});
    ones.remove_padding = remove_padding;
    auto out = model->forward(ones, head, nullptr);
    EXPECT_TRUE(torch::equal(out.log_probs, torch::zeros({2}))) << remove_padding;
    EXPECT_TRUE(torch::equal(out.entropy, torch::zeros({2}))) << remove_padding;
    auto none = packed_input({{}, {}});
    none.remove_padding = remove_padding;
    out = model->forward(none, head, nullptr);
    EXPECT_EQ(out.log_probs.sizes(), (std::vector<int64_t>{0})) << remove_padding;
    EXPECT_EQ(out.entropy.sizes(), (std::vector<int64_t>{0})) << remove_padding;
  }
}

// Explicit position ids are used as given (verl hands them); the default counts from 0 in each sequence.
TEST(PackedInput, PositionIdsAreUsedAsGiven) {
  auto model = builtin("llama-tiny");
  torch::NoGradGuard no_grad;
  auto in = packed_input(random_sequences({5, 3}, 9));
  in.remove_padding = true;
  const auto base = model->forward(in, {}, nullptr).log_probs;
  in.position_ids = torch::tensor({0, 1, 2, 3, 4, 0, 1, 2}, torch::kLong);
  EXPECT_TRUE(torch::allclose(model->forward(in, {}, nullptr).log_probs, base));
  in.position_ids = torch::tensor({0, 1, 2, 3, 4, 0, 2, 5}, torch::kLong);  // other distances
  EXPECT_FALSE(torch::allclose(model->forward(in, {}, nullptr).log_probs, base));
}

}  // namespace
}  // namespace models
}  // namespace enginery
