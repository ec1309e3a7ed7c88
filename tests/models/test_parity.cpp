// Parity with transformers 5.17: fixtures made by scripts/gpu/make_model_fixtures.py (tiny random llama / qwen2 /
// qwen3 written with save_pretrained, plus the log-probs and entropies transformers computed for fixed token lists).
#include <gtest/gtest.h>

#include <filesystem>

#include "models/causal_lm.h"
#include "models/model_factory.h"
#include "models/sequence_scores.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

using testing::data_dir;
using testing::read_json;

constexpr double kTol = 1e-4;

struct Expected {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::vector<double>> log_probs, entropy;
};

Expected load_expected(const std::string& dir) {
  auto j = read_json(dir + "/expected.json");
  return {j["tokens"].get<std::vector<std::vector<int64_t>>>(), j["log_probs"].get<std::vector<std::vector<double>>>(),
          j["entropy"].get<std::vector<std::vector<double>>>()};
}

std::shared_ptr<DecoderModel> load(const std::string& dir) {
  ModelConfig cfg;
  cfg.path = dir;
  auto model = build_model(cfg, "language_model");
  model->eval();
  return model;
}

// Runs the sequences as one batch padded on `side` (packed without its padding when `packed`: the
// model.use_remove_padding path), returns per-sequence rows in the t = 0..len-2 layout.
void check_batched(DecoderModel& model, const Expected& e, bool left, int64_t chunk_tokens, bool packed = false) {
  int64_t t = 0;
  for (const auto& s : e.tokens) t = std::max<int64_t>(t, s.size());
  const int64_t b = e.tokens.size();
  auto ids = torch::full({b, t}, 3, torch::kLong);  // a real token id as filler: the mask alone must exclude it
  auto mask = torch::zeros({b, t}, torch::kLong);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = e.tokens[i].size(), start = left ? t - len : 0;
    for (int64_t k = 0; k < len; ++k) ids[i][start + k] = e.tokens[i][k];
    mask[i].narrow(0, start, len).fill_(1);
  }
  torch::NoGradGuard no_grad;
  HeadOptions head;
  head.compute_entropy = true;
  head.chunk_tokens = chunk_tokens;
  ModelInputs in{ids, mask, torch::Tensor()};
  in.remove_padding = packed;
  auto out = model.forward(in, head, nullptr);
  ASSERT_EQ(out.log_probs.sizes(), (std::vector<int64_t>{b, t}));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = e.tokens[i].size(), start = left ? t - len : 0;
    for (int64_t k = 0; k + 1 < len; ++k) {
      EXPECT_NEAR(out.log_probs[i][start + k + 1].item<double>(), e.log_probs[i][k], kTol) << "seq " << i << " t " << k;
      EXPECT_NEAR(out.entropy[i][start + k + 1].item<double>(), e.entropy[i][k], kTol) << "seq " << i << " t " << k;
    }
    // Positions without a real (previous, current) token pair carry zeros.
    for (int64_t p = 0; p < t; ++p) {
      const bool pair = p > start && p < start + len;
      if (!pair) EXPECT_EQ(out.log_probs[i][p].item<double>(), 0.0) << "seq " << i << " pos " << p;
    }
  }
}

// The fixture's sequences as a packed input with an empty sequence and one-token sequences between them; the
// outputs in verl's alignment: log_probs[off + k] = transformers' log p(token k + 1 | tokens <= k), 0 at a
// sequence's last token.
void check_packed_input(DecoderModel& model, const Expected& e, bool remove_padding, int64_t chunk_tokens) {
  std::vector<std::vector<int64_t>> seqs{{e.tokens[0][0]}};
  std::vector<int64_t> fixture{-1};  // which fixture sequence each packed one is (-1: an added one)
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    seqs.push_back(e.tokens[i]);
    fixture.push_back(static_cast<int64_t>(i));
    if (i == 0) {
      seqs.push_back({});
      fixture.push_back(-1);
      seqs.push_back({e.tokens[0][1]});
      fixture.push_back(-1);
    }
  }
  torch::NoGradGuard no_grad;
  HeadOptions head;
  head.compute_entropy = true;
  head.chunk_tokens = chunk_tokens;
  ModelInputs in = testing::packed_input(seqs);
  in.remove_padding = remove_padding;
  const int64_t n = in.input_ids.size(0);
  auto out = model.forward(in, head, nullptr);
  ASSERT_EQ(out.log_probs.sizes(), (std::vector<int64_t>{n}));
  ASSERT_EQ(out.entropy.sizes(), (std::vector<int64_t>{n}));
  int64_t off = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t len = static_cast<int64_t>(seqs[s].size());
    for (int64_t k = 0; k + 1 < len; ++k) {
      const int64_t f = fixture[s];
      ASSERT_GE(f, 0);
      EXPECT_NEAR(out.log_probs[off + k].item<double>(), e.log_probs[f][k], kTol) << "seq " << f << " t " << k;
      EXPECT_NEAR(out.entropy[off + k].item<double>(), e.entropy[f][k], kTol) << "seq " << f << " t " << k;
    }
    if (len > 0) {
      EXPECT_EQ(out.log_probs[off + len - 1].item<double>(), 0.0) << "last token of packed sequence " << s;
      EXPECT_EQ(out.entropy[off + len - 1].item<double>(), 0.0) << "last token of packed sequence " << s;
    }
    off += len;
  }
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, PackedInputMatchesTransformers) {
  const auto dir = data_dir(GetParam());
  auto model = load(dir);
  const auto e = load_expected(dir);
  for (bool remove_padding : {true, false}) {
    SCOPED_TRACE(remove_padding ? "remove_padding on" : "remove_padding off");
    check_packed_input(*model, e, remove_padding, /*chunk_tokens=*/0);
    check_packed_input(*model, e, remove_padding, /*chunk_tokens=*/5);
  }
}

TEST_P(Parity, UnpaddedSequencesMatchTransformers) {
  const auto dir = data_dir(GetParam());
  auto e = load_expected(dir);
  auto model = load(dir);
  auto scores = score_sequences(*model, e.tokens, {torch::kCPU, c10::kFloat, /*max_batch_tokens=*/1});
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    ASSERT_EQ(scores.log_probs[i].size(), e.log_probs[i].size());
    for (size_t k = 0; k < e.log_probs[i].size(); ++k) {
      EXPECT_NEAR(scores.log_probs[i][k], e.log_probs[i][k], kTol) << "seq " << i << " t " << k;
      EXPECT_NEAR(scores.entropy[i][k], e.entropy[i][k], kTol) << "seq " << i << " t " << k;
    }
  }
}

TEST_P(Parity, RightPaddedBatchMatchesTransformers) {
  const auto dir = data_dir(GetParam());
  auto model = load(dir);
  check_batched(*model, load_expected(dir), /*left=*/false, /*chunk_tokens=*/0);
}

TEST_P(Parity, LeftPaddedBatchInSmallChunksMatchesTransformers) {
  const auto dir = data_dir(GetParam());
  auto model = load(dir);
  check_batched(*model, load_expected(dir), /*left=*/true, /*chunk_tokens=*/7);
}

TEST_P(Parity, PackedRightPaddedBatchMatchesTransformers) {
  const auto dir = data_dir(GetParam());
  auto model = load(dir);
  check_batched(*model, load_expected(dir), /*left=*/false, /*chunk_tokens=*/0, /*packed=*/true);
}

TEST_P(Parity, PackedLeftPaddedBatchMatchesTransformers) {
  const auto dir = data_dir(GetParam());
  auto model = load(dir);
  check_batched(*model, load_expected(dir), /*left=*/true, /*chunk_tokens=*/5, /*packed=*/true);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::Values("hf_llama_gqa", "hf_qwen2_tied", "hf_qwen3_qknorm"));

TEST(ParityFixtures, CoverTheArchitectureFeatures) {
  auto load_lm = [](const std::string& name) { return std::dynamic_pointer_cast<CausalLM>(load(data_dir(name))); };
  auto llama = load_lm("hf_llama_gqa");
  EXPECT_EQ(llama->args().rope.type, "llama3");
  EXPECT_LT(llama->args().num_key_value_heads, llama->args().num_attention_heads);
  EXPECT_FALSE(llama->tied_embeddings());
  EXPECT_TRUE(std::filesystem::exists(data_dir("hf_llama_gqa") + "/model.safetensors.index.json"));
  auto qwen2 = load_lm("hf_qwen2_tied");
  EXPECT_TRUE(qwen2->tied_embeddings());
  EXPECT_TRUE(qwen2->named_parameters().contains("model.layers.0.self_attn.q_proj.bias"));
  auto qwen3 = load_lm("hf_qwen3_qknorm");
  EXPECT_NE(qwen3->args().head_dim * qwen3->args().num_attention_heads, qwen3->args().hidden_size);
  EXPECT_TRUE(qwen3->named_parameters().contains("model.layers.1.self_attn.k_norm.weight"));
}

// The long-standing config.json form (rope_theta + rope_scaling + torch_dtype), written by hand for the llama
// fixture, loads the same model.
TEST(ParityFixtures, LongStandingConfigFormGivesTheSameModel) {
  testing::TempDir tmp;
  const auto src = data_dir("hf_llama_gqa");
  for (const auto& entry : std::filesystem::directory_iterator(src)) {
    if (entry.path().filename() != "config.json") {
      std::filesystem::copy_file(entry.path(), std::filesystem::path(tmp.str()) / entry.path().filename());
    }
  }
  testing::write_text(tmp.sub("config.json"), R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "vocab_size": 128, "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "hidden_act": "silu",
  "rope_theta": 10000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64, "rope_type": "llama3"},
  "tie_word_embeddings": false, "torch_dtype": "float32", "transformers_version": "4.45.0"
})");
  auto e = load_expected(src);
  auto model = load(tmp.str());
  auto scores = score_sequences(*model, e.tokens);
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    for (size_t k = 0; k < e.log_probs[i].size(); ++k) {
      EXPECT_NEAR(scores.log_probs[i][k], e.log_probs[i][k], kTol) << "seq " << i << " t " << k;
    }
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
