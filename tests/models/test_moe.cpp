// qwen3_moe (models/moe.h) against transformers: fixtures made by tests/models/make_moe_fixtures.py (tiny random
// Qwen3MoeForCausalLM written with save_pretrained, log-probs, entropies and gradients computed in float64), plus
// the expert GEMM backends against each other and the config's checks.
#include <gtest/gtest.h>

#include <set>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/model_args.h"
#include "models/model_factory.h"
#include "models/moe.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

using testing::data_dir;
using testing::max_diff;
using testing::read_json;

// transformers' router softmax runs in fp32 even in a float64 model (so does enginery's): the routing weights
// carry fp32 rounding, well inside the dense fixtures' bar of 1e-4.
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

std::shared_ptr<CausalLM> load_fp64(const std::string& dir) {
  ModelConfig cfg;
  cfg.path = dir;
  cfg.override_dtype = c10::kDouble;
  return std::dynamic_pointer_cast<CausalLM>(build_model(cfg, "language_model"));
}

// The sequences as one batch padded on `side`; mask 1 on the real tokens.
struct Batch {
  torch::Tensor ids, mask;
  std::vector<int64_t> start;
};
Batch padded_batch(const Expected& e, bool left) {
  int64_t t = 0;
  for (const auto& s : e.tokens) t = std::max<int64_t>(t, s.size());
  const int64_t b = e.tokens.size();
  Batch batch{torch::full({b, t}, 3, torch::kLong), torch::zeros({b, t}, torch::kLong), {}};
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = e.tokens[i].size(), start = left ? t - len : 0;
    for (int64_t k = 0; k < len; ++k) batch.ids[i][start + k] = e.tokens[i][k];
    batch.mask[i].narrow(0, start, len).fill_(1);
    batch.start.push_back(start);
  }
  return batch;
}

ModelOutput run(CausalLM& model, const Batch& batch, bool packed) {
  HeadOptions head;
  head.compute_entropy = true;
  ModelInputs in{batch.ids, batch.mask, torch::Tensor()};
  in.remove_padding = packed;
  return model.forward(in, head, nullptr);
}

void expect_matches(const ModelOutput& out, const Batch& batch, const Expected& e) {
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    for (size_t k = 0; k + 1 < e.tokens[i].size(); ++k) {
      const int64_t p = batch.start[i] + static_cast<int64_t>(k) + 1;
      EXPECT_NEAR(out.log_probs[i][p].item<double>(), e.log_probs[i][k], kTol) << "seq " << i << " t " << k;
      EXPECT_NEAR(out.entropy[i][p].item<double>(), e.entropy[i][k], kTol) << "seq " << i << " t " << k;
    }
  }
}

class MoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeParity, LogProbsAndEntropyMatchTransformersInFloat64) {
  const auto dir = data_dir(GetParam());
  const auto e = load_expected(dir);
  auto model = load_fp64(dir);
  model->eval();
  torch::NoGradGuard no_grad;
  for (bool left : {false, true}) {
    for (bool packed : {false, true}) {
      SCOPED_TRACE(std::string(left ? "left" : "right") + " padding, " + (packed ? "packed" : "padded"));
      const auto batch = padded_batch(e, left);
      expect_matches(run(*model, batch, packed), batch, e);
    }
  }
}

// The fixture's sequences as a packed input, an empty and a one-token sequence among them (neither adds to the
// loss: an empty one has no token, a one-token one has no next token).
std::vector<std::vector<int64_t>> with_empty_and_one_token(const Expected& e) {
  std::vector<std::vector<int64_t>> seqs{e.tokens[0], {}, {e.tokens[1][0]}};
  for (size_t i = 1; i < e.tokens.size(); ++i) seqs.push_back(e.tokens[i]);
  return seqs;
}

ModelOutput run_packed(CausalLM& model, const std::vector<std::vector<int64_t>>& seqs, bool remove_padding) {
  HeadOptions head;
  head.compute_entropy = true;
  ModelInputs in = testing::packed_input(seqs);
  in.remove_padding = remove_padding;
  return model.forward(in, head, nullptr);
}

// Packed outputs in verl's alignment against transformers' token-aligned log-probs: packed row off + k holds
// token k + 1's, a sequence's last row 0.
void expect_packed_matches(const ModelOutput& out, const std::vector<std::vector<int64_t>>& seqs, const Expected& e) {
  int64_t off = 0;
  size_t fixture = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t len = static_cast<int64_t>(seqs[s].size());
    const bool added = s == 1 || s == 2;
    for (int64_t k = 0; k + 1 < len; ++k) {
      ASSERT_FALSE(added);
      EXPECT_NEAR(out.log_probs[off + k].item<double>(), e.log_probs[fixture][k], kTol) << "seq " << fixture;
      EXPECT_NEAR(out.entropy[off + k].item<double>(), e.entropy[fixture][k], kTol) << "seq " << fixture;
    }
    if (len > 0) EXPECT_EQ(out.log_probs[off + len - 1].item<double>(), 0.0) << "packed sequence " << s;
    if (!added) ++fixture;
    off += len;
  }
  EXPECT_EQ(out.log_probs.size(0), off);
}

TEST_P(MoeParity, PackedInputMatchesTransformersInFloat64) {
  const auto dir = data_dir(GetParam());
  const auto e = load_expected(dir);
  auto model = load_fp64(dir);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto seqs = with_empty_and_one_token(e);
  for (bool remove_padding : {true, false}) {
    SCOPED_TRACE(remove_padding ? "remove_padding on" : "remove_padding off");
    expect_packed_matches(run_packed(*model, seqs, remove_padding), seqs, e);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeParity, ::testing::Values("hf_qwen3_moe", "hf_qwen3_moe_sparse_step"));

// d/dtheta of sum(log_prob + 0.5 * entropy) over the real tokens, padded and packed, against transformers'.
TEST(MoeParity, GradientsMatchTransformersPaddedAndPacked) {
  const auto dir = data_dir("hf_qwen3_moe");
  const auto e = load_expected(dir);
  SafetensorsFile want(dir + "/grads.safetensors");
  // Padded input (remove_padding off, on), then a packed input (cu_seqlens) with remove_padding on, off.
  for (int form = 0; form < 4; ++form) {
    const bool packed = form % 2 == 1;
    SCOPED_TRACE((form < 2 ? std::string("padded input, ") : std::string("packed input, ")) +
                 (packed ? "remove_padding on" : "remove_padding off"));
    auto model = load_fp64(dir);
    const auto batch = padded_batch(e, /*left=*/false);
    const auto out = form < 2 ? run(*model, batch, packed) : run_packed(*model, with_empty_and_one_token(e), packed);
    (out.log_probs + 0.5 * out.entropy).sum().backward();
    std::set<std::string> seen;
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(want.contains(p.key())) << p.key();
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      const auto expected = want.tensor(p.key());
      const double scale = expected.abs().max().item<double>();
      EXPECT_LE(max_diff(p.value().grad(), expected), 1e-6 * std::max(1.0, scale)) << p.key();
      seen.insert(p.key());
    }
    EXPECT_EQ(seen.size(), want.names().size());
  }
}

TEST(MoeModel, KeepsTheCheckpointNamesAndLayerKinds) {
  auto model = load_fp64(data_dir("hf_qwen3_moe"));
  const auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("model.layers.0.mlp.gate.weight"));
  EXPECT_EQ(params["model.layers.0.mlp.gate.weight"].sizes(), (std::vector<int64_t>{6, 32}));
  EXPECT_EQ(params["model.layers.0.mlp.experts.5.down_proj.weight"].sizes(), (std::vector<int64_t>{32, 16}));
  EXPECT_TRUE(params.contains("model.layers.1.mlp.up_proj.weight"));  // mlp_only_layers = [1]
  EXPECT_FALSE(params.contains("model.layers.1.mlp.gate.weight"));
  auto step = load_fp64(data_dir("hf_qwen3_moe_sparse_step"));  // decoder_sparse_step 2: layer 1 sparse only
  EXPECT_TRUE(step->named_parameters().contains("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(step->named_parameters().contains("model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_FALSE(step->args().moe.norm_topk_prob);
  EXPECT_TRUE(model->args().moe.norm_topk_prob);
}

// One at a time: both backends give the same rows and the same gradients, an expert without rows included.
TEST(MoeExpertGemm, GroupedAndPaddedAgree) {
  torch::manual_seed(0);
  const int64_t experts = 4, k = 8, n = 12, rows = 11;
  ASSERT_TRUE(grouped_gemm_applies(torch::kCPU, c10::kFloat, k, n));
  ASSERT_FALSE(grouped_gemm_applies(torch::kCPU, c10::kDouble, k, n));
  const auto counts = torch::tensor({3, 0, 6, 2}, torch::kLong);
  auto x0 = torch::randn({rows, k});
  std::vector<torch::Tensor> w0;
  for (int64_t i = 0; i < experts * 2; ++i) w0.push_back(torch::randn({n / 2, k}));
  const auto gy = torch::randn({rows, n});
  std::vector<torch::Tensor> outs, x_grads, w_grads;
  for (ExpertGemm gemm : {ExpertGemm::kGrouped, ExpertGemm::kPadded}) {
    auto x = x0.clone().requires_grad_(true);
    std::vector<torch::Tensor> w;
    for (const auto& t : w0) w.push_back(t.clone().requires_grad_(true));
    auto y = expert_linear(x, counts, w, 2, gemm);
    (y * gy).sum().backward();
    outs.push_back(y.detach());
    x_grads.push_back(x.grad());
    std::vector<torch::Tensor> g;
    for (const auto& t : w) g.push_back(t.grad());
    w_grads.push_back(torch::stack(g));
  }
  // The reference: each expert's rows times the concatenation of its two weights.
  std::vector<torch::Tensor> want;
  int64_t start = 0;
  for (int64_t ex = 0; ex < experts; ++ex) {
    const int64_t c = counts[ex].item<int64_t>();
    want.push_back(torch::matmul(x0.narrow(0, start, c), torch::cat({w0[2 * ex], w0[2 * ex + 1]}, 0).t()));
    start += c;
  }
  EXPECT_LE(max_diff(outs[0], torch::cat(want)), 1e-5);
  EXPECT_LE(max_diff(outs[1], torch::cat(want)), 1e-5);
  EXPECT_LE(max_diff(x_grads[0], x_grads[1]), 1e-5);
  EXPECT_LE(max_diff(w_grads[0], w_grads[1]), 1e-5);
  EXPECT_EQ(w_grads[0][2].abs().max().item<float>(), 0.0f);  // expert 1 (weights 2, 3) had no rows
}

// An FSDP engine frees the gathered weights after a unit's forward and gathers them again before its backward
// (docs/ARCHITECTURE.md, "Mixture of experts"): the backward must read the weights then, not a stacked copy kept from
// the forward (which would also hold every layer's experts unsharded). Weights changed in place between forward and
// backward (through .data(), as an engine writes them) give the new weights' input gradient.
TEST(MoeExpertGemm, BackwardReadsTheWeightsAgainInsteadOfAStackedCopy) {
  torch::manual_seed(1);
  const auto counts = torch::tensor({2, 3}, torch::kLong);
  for (ExpertGemm gemm : {ExpertGemm::kGrouped, ExpertGemm::kPadded}) {
    auto x = torch::randn({5, 8}).requires_grad_(true);
    std::vector<torch::Tensor> w{torch::randn({4, 8}).requires_grad_(true), torch::randn({4, 8}).requires_grad_(true)};
    auto y = expert_linear(x, counts, w, 1, gemm);
    for (auto& t : w) t.data().mul_(2.0);
    const auto gy = torch::randn({5, 4});
    (y * gy).sum().backward();
    const auto want = torch::cat({torch::matmul(gy.narrow(0, 0, 2), w[0].detach()),
                                  torch::matmul(gy.narrow(0, 2, 3), w[1].detach())});
    EXPECT_LE(max_diff(x.grad(), want), 1e-5) << (gemm == ExpertGemm::kGrouped ? "grouped" : "padded");
  }
}

TEST(MoeRouter, LoadBalancingLossMatchesTransformers) {
  const auto j = read_json(data_dir("hf_qwen3_moe") + "/expected.json")["aux_loss"];
  std::vector<torch::Tensor> logits;
  for (const auto& layer : j["logits"]) {
    std::vector<double> flat;
    for (const auto& row : layer)
      for (double v : row) flat.push_back(v);
    logits.push_back(torch::tensor(flat, torch::kDouble).view({static_cast<int64_t>(layer.size()), -1}));
  }
  std::vector<int64_t> mask_flat;
  for (const auto& row : j["mask"])
    for (int64_t v : row) mask_flat.push_back(v);
  const auto mask = torch::tensor(mask_flat, torch::kLong).view({static_cast<int64_t>(j["mask"].size()), -1});
  const int64_t experts = j["num_experts"], top_k = j["top_k"];
  EXPECT_NEAR(load_balancing_loss(logits, experts, top_k, mask).item<double>(), j["masked"].get<double>(), 1e-6);
  EXPECT_NEAR(load_balancing_loss(logits, experts, top_k).item<double>(), j["unmasked"].get<double>(), 1e-6);
}

std::string moe_config(const std::string& extra) {
  return R"({"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)" +
         extra + "}";
}

TEST(MoeConfig, ReadsQwen3MoeConfigDefaults) {
  const auto a = parse_hf_config(moe_config(""), "config.json");
  EXPECT_EQ(a.moe.num_experts, 128);
  EXPECT_EQ(a.moe.num_experts_per_tok, 8);
  EXPECT_EQ(a.moe.moe_intermediate_size, 768);
  EXPECT_FALSE(a.moe.norm_topk_prob);
  EXPECT_EQ(a.head_dim, 8);  // Qwen3MoeConfig has no head_dim default of its own: hidden / heads
  EXPECT_TRUE(a.qk_norm);
  EXPECT_TRUE(is_moe_layer(a, 0));
  const auto dense = parse_hf_config(moe_config(R"(, "num_experts": 0)"), "config.json");
  EXPECT_FALSE(is_moe_layer(dense, 0));
  // transformers 5 writes num_experts as num_local_experts.
  EXPECT_EQ(parse_hf_config(moe_config(R"(, "num_local_experts": 6, "num_experts_per_tok": 2)"), "c").moe.num_experts,
            6);
}

TEST(MoeConfig, RefusesFieldsThatChangeTheMathByName) {
  auto refusal = [](const std::string& extra) {
    try {
      parse_hf_config(moe_config(extra), "config.json");
    } catch (const EngineryError& e) {
      return std::string(e.what()) + " | " + e.where() + " | " + e.allowed();
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(R"(, "num_experts": 4, "num_experts_per_tok": 5)")
                .find("config.json: num_experts_per_tok | an integer in [1, 4]"),
            std::string::npos);
  EXPECT_NE(refusal(R"(, "num_experts": 4)").find("(8, transformers' default) is more than the 4 experts"),
            std::string::npos);
  EXPECT_NE(refusal(R"(, "mlp_only_layers": [1.5])").find("config.json: mlp_only_layers | a list of layer indices"),
            std::string::npos);
  EXPECT_EQ(refusal(R"(, "num_experts": 8, "mlp_only_layers": [7])"), "accepted");  // as transformers: no effect
  EXPECT_NE(refusal(R"(, "mlp_only_layers": 1)").find("must be a list"), std::string::npos);
  EXPECT_NE(refusal(R"(, "router_aux_loss_coef": -1)").find("router_aux_loss_coef"), std::string::npos);
  EXPECT_NE(refusal(R"(, "decoder_sparse_step": 0)").find("decoder_sparse_step"), std::string::npos);
  EXPECT_NE(refusal(R"(, "norm_topk_prob": 1)").find("norm_topk_prob' must be true or false"), std::string::npos);
  EXPECT_NE(refusal(R"(, "use_sliding_window": true)").find("use_sliding_window"), std::string::npos);
  const auto both = refusal(R"(, "num_experts": 4, "num_local_experts": 6)");
  EXPECT_NE(both.find("num_local_experts (6) and num_experts (4) disagree"), std::string::npos) << both;
  EXPECT_NE(both.find("| config.json: num_local_experts |"), std::string::npos) << both;
}

TEST(MoeModel, BuiltinTinyRoundTripsThroughSaveHf) {
  auto model = testing::builtin("qwen3-moe-tiny");
  EXPECT_EQ(model->hf_model_type(), "qwen3_moe");
  EXPECT_THROW(model->set_fp8_recipe(Fp8Recipe::kTensorwise), EngineryError);
  testing::TempDir tmp;
  save_hf(*model, tmp.str());
  const auto again = read_hf_config(tmp.str());
  EXPECT_EQ(again.moe.num_experts, 8);
  EXPECT_EQ(again.moe.mlp_only_layers, std::vector<int64_t>{3});
  ModelConfig cfg;
  cfg.path = tmp.str();
  auto loaded = build_model(cfg, "language_model");
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(loaded->named_parameters()[p.key()].equal(p.value())) << p.key();
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
