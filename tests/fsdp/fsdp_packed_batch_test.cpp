// The packed batch ([Note: packed batch], host_api/batch.h) through the host's loop over real Gloo ranks: a packed
// batch trains and infers exactly as the same sequences padded (losses, grad norms, parameters, outputs in verl's
// alignment), with fixed and dynamic micro-batches (which reorder sequences); Batch cuts per-token and per-sequence
// tensors apart; the loop refuses a malformed packed batch by field, row (sequence) and token; the padded edge hands
// outputs back at each token, left padding included.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine_driver/batch_check.h"
#include "engine_driver/padded_edge.h"
#include "engine_driver/step_loop.h"
#include "host_api/error.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"

namespace enginery {
namespace fsdp_test {
namespace {

// The real tokens of a padded batch's rows, written out sequence by sequence (independent of PaddedEdge).
Batch pack_by_hand(const Batch& padded) {
  std::vector<torch::Tensor> ids, mask;
  std::vector<int64_t> ends{0};
  for (int64_t r = 0; r < padded.size(); ++r) {
    const int64_t n = padded.at("attention_mask")[r].sum().item<int64_t>();  // right padding
    ids.push_back(padded.at("input_ids")[r].narrow(0, 0, n));
    mask.push_back(padded.at("loss_mask")[r].narrow(0, 0, n));
    ends.push_back(ends.back() + n);
  }
  Batch packed;
  packed.set("cu_seqlens", torch::tensor(ends, torch::kLong));
  packed.set("input_ids", torch::cat(ids));
  packed.set("loss_mask", torch::cat(mask));
  return packed;
}

// verl's SFT loss on a packed batch: log_probs[t] predicts token t + 1, so it counts where token t + 1 is a target.
LossResult packed_sft_loss(const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
  const auto next_is_target = torch::roll(mb.at("loss_mask").to(torch::kFloat), -1, 0);
  return {-(out.log_probs * next_is_target).sum() / ctx.global_num_tokens, {}};
}

class FsdpPackedBatch : public ::testing::TestWithParam<bool> {};

TEST_P(FsdpPackedBatch, TrainsAndInfersAsTheSameSequencesPadded) {
  const bool dynamic = GetParam();
  testing::run_ranks(2, [dynamic](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, 2, ctx.group, ctx.store);
    args.engine.use_dynamic_bsz = dynamic;
    args.engine.max_token_len_per_gpu = 20;
    fsdp::FSDPEngine padded_engine(args, tiny_builder(TinyConfig{}));
    fsdp::FSDPEngine packed_engine(args, tiny_builder(TinyConfig{}));
    padded_engine.initialize();
    packed_engine.initialize();
    for (int step = 0; step < 2; ++step) {
      const Batch padded = rank_slice(make_batch(8, 9, 64, 90 + step), ctx.rank, 2);
      const Batch packed = pack_by_hand(padded);
      const BatchOutput a = train_batch(padded_engine, padded, sft_loss);
      const BatchOutput b = train_batch(packed_engine, packed, packed_sft_loss);
      EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-6);
      EXPECT_NEAR(a.grad_norm.item<double>(), b.grad_norm.item<double>(), 1e-6);
    }
    const Batch padded = rank_slice(make_batch(8, 9, 64, 99), ctx.rank, 2);
    Batch packed = pack_by_hand(padded);
    packed.set_meta("calculate_entropy", true);
    Batch padded_entropy = padded;
    padded_entropy.set_meta("calculate_entropy", true);
    const BatchOutput a = infer_batch(padded_engine, padded_entropy);
    const BatchOutput b = infer_batch(packed_engine, packed);
    const auto ends = packed.at("cu_seqlens");
    for (const char* name : {"log_probs", "entropy"}) {
      const torch::Tensor& flat = b.outputs.at(name);
      ASSERT_EQ(flat.size(0), packed.at("input_ids").size(0)) << name;
      for (int64_t r = 0; r < padded.size(); ++r) {
        const int64_t begin = ends[r].item<int64_t>(), n = ends[r + 1].item<int64_t>() - begin;
        // verl's alignment: position t holds the padded layout's t + 1; the last token of a sequence holds 0.
        EXPECT_TRUE(torch::allclose(flat.narrow(0, begin, n - 1), a.outputs.at(name)[r].narrow(0, 1, n - 1), 1e-5,
                                    1e-6)) << name << " row " << r;
        EXPECT_EQ(flat[begin + n - 1].item<double>(), 0.0) << name << " row " << r;
      }
    }
    const auto want = engine_params(padded_engine);
    for (const auto& [name, got] : engine_params(packed_engine)) {
      EXPECT_TRUE(torch::allclose(got, want.at(name), 1e-5, 1e-7)) << name;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(MicroBatching, FsdpPackedBatch, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Dynamic" : "Fixed"; });

Batch three_sequences() {
  Batch b;
  b.set("cu_seqlens", torch::tensor({0, 2, 5, 6}, torch::kLong));
  b.set("input_ids", torch::arange(10, 16));
  b.set("loss_mask", torch::tensor({0, 1, 0, 1, 1, 0}, torch::kLong));
  b.set("response_mask", torch::tensor({{1, 0}, {1, 1}, {0, 0}}, torch::kLong));  // per sequence
  return b;
}

TEST(PackedBatch, SliceAndSelectCutPerTokenAndPerSequenceTensorsApart) {
  const Batch b = three_sequences();
  EXPECT_EQ(b.size(), 3);
  const Batch tail = b.slice(1, 3);
  EXPECT_TRUE(torch::equal(tail.at("cu_seqlens"), torch::tensor({0, 3, 4}, torch::kLong)));
  EXPECT_TRUE(torch::equal(tail.at("input_ids"), torch::arange(12, 16)));
  EXPECT_TRUE(torch::equal(tail.at("response_mask"), torch::tensor({{1, 1}, {0, 0}}, torch::kLong)));
  const Batch picked = b.select({2, 0});
  EXPECT_TRUE(torch::equal(picked.at("cu_seqlens"), torch::tensor({0, 1, 3}, torch::kLong)));
  EXPECT_TRUE(torch::equal(picked.at("input_ids"), torch::tensor({15, 10, 11}, torch::kLong)));
  EXPECT_TRUE(torch::equal(picked.at("loss_mask"), torch::tensor({0, 0, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(picked.at("response_mask"), torch::tensor({{0, 0}, {1, 0}}, torch::kLong)));
}

std::string refusal(const Batch& b, int64_t vocab = 0) {
  try {
    check_batch(b, torch::kCPU, BatchLimits{vocab}, /*needs_targets=*/true);
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(PackedBatch, RefusalsNameTheFieldRowAndToken) {
  EXPECT_EQ(refusal(three_sequences(), 16), "(accepted)");
  struct Case {
    std::function<void(Batch&)> spoil;
    std::string want;
  };
  const std::vector<Case> cases = {
      {[](Batch& b) { b.set("cu_seqlens", torch::tensor({0, 2, 2, 6}, torch::kLong)); },
       "batch['cu_seqlens']: sequence 1 has 0 tokens"},
      {[](Batch& b) { b.set("cu_seqlens", torch::tensor({0, 2, 5}, torch::kLong)); }, "for 6 tokens"},
      {[](Batch& b) { b.set("attention_mask", torch::ones({6}, torch::kLong)); }, "is given per token with cu_seqlens"},
      {[](Batch& b) { b.set("loss_mask", torch::tensor({0, 1, 1, 1, 1, 0}, torch::kLong)); },
       "batch['loss_mask'] row 1: token 0 is a target, but it is its sequence's first token"},
      {[](Batch& b) { b.set("input_ids", torch::tensor({1, 2, 3, 4, 99, 5}, torch::kLong)); },
       "batch['input_ids'] row 1: token 2 is 99, outside the model's vocabulary of 16 tokens"},
      {[](Batch& b) { b.set("advantages", torch::ones({4})); }, "batch['advantages']: has shape [4]"},
      {[](Batch& b) { b.set("advantages", torch::tensor({1.0, 0.0, std::nan("")})); },
       "batch['advantages'] row 2: token 0 is nan"},
  };
  for (const Case& c : cases) {
    Batch b = three_sequences();
    c.spoil(b);
    const std::string got = refusal(b, 16);
    EXPECT_NE(got.find(c.want), std::string::npos) << got;
  }
}

TEST(PaddedEdge, OutputsComeBackAtEachTokenWithLeftPadding) {
  Batch padded;
  padded.set("input_ids", torch::tensor({{0, 0, 5, 6, 7}, {8, 9, 1, 0, 0}}, torch::kLong));
  padded.set("attention_mask", torch::tensor({{0, 0, 1, 1, 1}, {1, 1, 1, 0, 0}}, torch::kLong));
  padded.set("loss_mask", torch::tensor({{0, 0, 1, 1, 1}, {0, 1, 1, 0, 0}}, torch::kLong));
  const PaddedEdge edge(padded);
  EXPECT_TRUE(torch::equal(edge.packed().at("input_ids"), torch::tensor({5, 6, 7, 8, 9, 1}, torch::kLong)));
  EXPECT_TRUE(torch::equal(edge.packed().at("cu_seqlens"), torch::tensor({0, 3, 6}, torch::kLong)));
  // The first real token of the left-padded row is no target: nothing predicts it.
  EXPECT_TRUE(torch::equal(edge.packed().at("loss_mask"), torch::tensor({0, 1, 1, 0, 1, 1}, torch::kLong)));
  const auto flat = torch::tensor({0.1, 0.2, 0.3, 0.4, 0.5, 0.6});
  const auto out = edge.padded_outputs({{"log_probs", flat}, {"values", flat}});
  EXPECT_TRUE(torch::allclose(out.at("log_probs"), torch::tensor({{0.0, 0.0, 0.0, 0.1, 0.2}, {0.0, 0.4, 0.5, 0.0, 0.0}})));
  EXPECT_TRUE(torch::allclose(out.at("values"), torch::tensor({{0.0, 0.0, 0.1, 0.2, 0.3}, {0.4, 0.5, 0.6, 0.0, 0.0}})));
}

TEST(PaddedEdge, ARowOfPaddingOnlyIsRefused) {
  Batch padded;
  padded.set("input_ids", torch::tensor({{5, 6}, {0, 0}}, torch::kLong));
  padded.set("attention_mask", torch::tensor({{1, 1}, {0, 0}}, torch::kLong));
  padded.set("loss_mask", torch::tensor({{0, 1}, {0, 0}}, torch::kLong));
  const std::string got = refusal(padded);
  EXPECT_NE(got.find("batch['attention_mask'] row 1: has no real token"), std::string::npos) << got;
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
