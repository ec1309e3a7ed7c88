// The unit interface the FSDP engine shards, hooks, gradient checkpointing (also with parameters freed between
// forward and backward, as an engine does), value heads, and CPU bf16 autocast.
#include <gtest/gtest.h>

#include <set>

#include "support/torch_compat.h"
#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/fused_ops.h"
#include "models/model_factory.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

using testing::builtin;

ModelInputs padded_inputs(int64_t vocab) {
  torch::manual_seed(5);
  auto ids = torch::randint(0, vocab, {3, 9}, torch::kLong);
  auto mask = torch::ones({3, 9}, torch::kLong);
  mask[1].narrow(0, 0, 4).fill_(0);  // left padding
  mask[2].narrow(0, 6, 3).fill_(0);  // right padding
  return {ids, mask, torch::Tensor()};
}

TEST(Units, CoverEveryParameterOnceWithHfNames) {
  for (const char* name : {"qwen2-tiny", "llama-tiny"}) {
    auto model = builtin(name);
    auto units = model->units();
    const auto& a = model->args();
    ASSERT_EQ(units.size(), static_cast<size_t>(a.num_hidden_layers + 2));
    EXPECT_EQ(units.front().name, "embed");
    EXPECT_EQ(units[1].name, "layers.0");
    EXPECT_EQ(units.back().name, "head");
    std::set<void*> model_params, unit_params;
    for (auto& p : model->named_parameters()) model_params.insert(p.value().data_ptr());
    size_t count = 0;
    for (auto& u : units) {
      for (auto& p : u.module->parameters()) {
        unit_params.insert(p.data_ptr());
        ++count;
      }
    }
    EXPECT_EQ(unit_params, model_params) << name;
    EXPECT_EQ(count, model_params.size()) << name;  // no parameter in two units
    auto params = model->named_parameters();
    EXPECT_TRUE(params.contains("model.embed_tokens.weight"));
    EXPECT_TRUE(params.contains("model.layers.0.mlp.gate_proj.weight"));
    EXPECT_TRUE(params.contains("model.layers.0.post_attention_layernorm.weight"));
    EXPECT_TRUE(params.contains("model.norm.weight"));
    EXPECT_EQ(params.contains("lm_head.weight"), !model->tied_embeddings()) << name;
    auto head = units.back().module->named_parameters();
    EXPECT_TRUE(head.contains("norm.weight"));
    EXPECT_EQ(head.size(), model->tied_embeddings() ? 1u : 2u) << name;
  }
}

class Recorder : public UnitHooks {
 public:
  void pre_forward(size_t unit) override { events.push_back("pre" + std::to_string(unit)); }
  void post_forward(size_t unit, const std::vector<torch::Tensor>& outputs) override {
    events.push_back("post" + std::to_string(unit) + ":" + std::to_string(outputs.size()));
  }
  std::vector<std::string> events;
};

TEST(Units, HooksRunAroundEachUnitInOrder) {
  auto model = builtin("qwen3-tiny");
  Recorder rec;
  HeadOptions head;
  head.compute_entropy = true;
  model->forward(padded_inputs(256), head, &rec);
  std::vector<std::string> want;
  const size_t n = model->units().size();
  for (size_t u = 0; u < n; ++u) {
    want.push_back("pre" + std::to_string(u));
    want.push_back("post" + std::to_string(u) + ":" + (u + 1 == n ? "2" : "1"));
  }
  EXPECT_EQ(rec.events, want);
}

std::map<std::string, torch::Tensor> loss_grads(CausalLM& model, const ModelInputs& in, UnitHooks* hooks = nullptr) {
  model.zero_grad();
  HeadOptions head;
  head.compute_entropy = true;
  auto out = model.forward(in, head, hooks);
  auto loss = out.log_probs.sum() + 0.3 * out.entropy.sum();
  loss.backward();
  std::map<std::string, torch::Tensor> g;
  for (auto& p : model.named_parameters()) g[p.key()] = p.value().grad().clone();
  return g;
}

void expect_close(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b,
                  double tol) {
  for (const auto& [name, t] : a) {
    EXPECT_LT((t - b.at(name)).abs().max().item<double>(), tol) << name;
  }
}

TEST(GradientCheckpointing, SameGradientsAsStoredActivations) {
  auto plain = builtin("llama-tiny");
  auto ckpt = builtin("llama-tiny", "language_model", /*checkpointing=*/true);
  auto in = padded_inputs(256);
  expect_close(loss_grads(*plain, in), loss_grads(*ckpt, in), 1e-6);
}

// Mimics an FSDP engine with reshard_after_forward: a layer's parameters are garbage between its forward and the
// hook on its output gradient, which restores them before the layer's backward recomputes it.
class FreeingHooks : public UnitHooks {
 public:
  explicit FreeingHooks(CausalLM& model) : units_(model.units()) {}
  void pre_forward(size_t) override {}
  void post_forward(size_t unit, const std::vector<torch::Tensor>& outputs) override {
    if (unit == 0 || unit + 1 == units_.size()) return;  // embeddings and head stay
    auto params = units_[unit].module->parameters();
    std::vector<torch::Tensor> saved;
    for (auto& p : params) {
      saved.push_back(p.detach().clone());
      p.data().fill_(std::numeric_limits<float>::quiet_NaN());
    }
    outputs[0].register_hook([params, saved](torch::Tensor grad) {
      for (size_t i = 0; i < params.size(); ++i) params[i].data().copy_(saved[i]);
      return grad;
    });
  }

 private:
  std::vector<Unit> units_;
};

TEST(GradientCheckpointing, RecomputesWithParametersRegatheredByTheEngine) {
  auto plain = builtin("qwen2-tiny");
  auto ckpt = builtin("qwen2-tiny", "language_model", true);
  auto in = padded_inputs(256);
  auto want = loss_grads(*plain, in);
  FreeingHooks hooks(*ckpt);
  auto got = loss_grads(*ckpt, in, &hooks);
  expect_close(want, got, 1e-6);
}

TEST(GradientCheckpointing, MlpPolicyGivesTheSameGradients) {
  for (const char* name : {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny"}) {
    auto plain = builtin(name);
    auto mlp = builtin(name, "language_model", true);
    EXPECT_EQ(mlp->recompute(), Recompute::kLayer);
    mlp->set_recompute(Recompute::kMlp);
    auto in = padded_inputs(256);
    auto want = loss_grads(*plain, in);
    // fp32 sums in another order (the residual's two gradients meet after the recomputed block): 1e-5.
    expect_close(want, loss_grads(*mlp, in), 1e-5);
    FreeingHooks hooks(*mlp);  // the MLP block is recomputed inside the layer's backward, after the regather
    expect_close(want, loss_grads(*mlp, in, &hooks), 1e-5);
  }
}

TEST(GradientCheckpointing, PolicyNamesAreCheckedAndNeedCheckpointingOn) {
  const std::string key = "engine.fsdp2.gradient_checkpointing_policy";
  EXPECT_EQ(recompute_policy(false, "layer", key), Recompute::kNothing);
  EXPECT_EQ(recompute_policy(true, "layer", key), Recompute::kLayer);
  EXPECT_EQ(recompute_policy(true, "mlp", key), Recompute::kMlp);
  try {
    recompute_policy(true, "attention", key);
    ADD_FAILURE() << "an unknown policy was accepted";
  } catch (const EngineryError& e) {
    EXPECT_EQ(e.where(), key);
    EXPECT_EQ(e.allowed(), "layer, mlp");
  }
  try {
    recompute_policy(false, "mlp", key);
    ADD_FAILURE() << "a policy without checkpointing was accepted";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("model.enable_gradient_checkpointing is false"), std::string::npos)
        << e.what();
  }
}

// The recomputed down projection: no GEMM forward, the linear's three gradients backward.
TEST(LinearOutputUnused, BackwardIsTheLinearsBackward) {
  torch::manual_seed(5);
  auto x = torch::randn({3, 5, 8}, torch::kDouble).requires_grad_(true);
  auto w = torch::randn({6, 8}, torch::kDouble).requires_grad_(true);
  auto b = torch::randn({6}, torch::kDouble).requires_grad_(true);
  auto g = torch::randn({3, 5, 6}, torch::kDouble);
  auto want = torch::autograd::grad({torch::nn::functional::linear(x, w, b)}, {x, w, b}, {g});
  auto out = linear_output_unused(x, w, b);
  EXPECT_EQ(out.sizes(), g.sizes());
  EXPECT_EQ((out - b).abs().sum().item<double>(), 0.0);  // no GEMM: the bias alone
  auto got = torch::autograd::grad({out}, {x, w, b}, {g});
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-12, 1e-12)) << i;
  auto no_bias = torch::autograd::grad({linear_output_unused(x, w, torch::Tensor())}, {x, w}, {g});
  EXPECT_TRUE(torch::allclose(no_bias[1], want[1], 1e-12, 1e-12));
}

TEST(ValueModel, ScoresEveryRealTokenAndSavesItsHead) {
  testing::TempDir tmp;
  ModelConfig cfg;
  cfg.path = testing::data_dir("hf_qwen2_tied");
  auto lm = build_model(cfg, "language_model");
  auto critic = std::dynamic_pointer_cast<CausalLM>(build_model(cfg, "value_model"));
  auto params = critic->named_parameters();
  EXPECT_FALSE(params.contains("lm_head.weight"));
  ASSERT_TRUE(params.contains("score.weight"));
  EXPECT_EQ(params["score.weight"].sizes(), (std::vector<int64_t>{1, 32}));
  EXPECT_GT(params["score.weight"].abs().sum().item<double>(), 0.0);  // initialised, not left at zero
  EXPECT_TRUE(torch::equal(params["model.embed_tokens.weight"], lm->named_parameters()["model.embed_tokens.weight"]));
  EXPECT_FALSE(critic->tied_embeddings());
  auto head_params = critic->units().back().module->named_parameters();
  EXPECT_TRUE(head_params.contains("score.weight"));

  auto in = padded_inputs(128);
  auto out = critic->forward(in, {}, nullptr);
  EXPECT_FALSE(out.log_probs.defined());
  ASSERT_EQ(out.values.sizes(), in.input_ids.sizes());
  EXPECT_EQ(out.values[1].narrow(0, 0, 4).abs().sum().item<double>(), 0.0);
  EXPECT_GT(out.values[0].abs().sum().item<double>(), 0.0);

  save_hf(*critic, tmp.sub("critic"), 0);
  auto config = testing::read_json(tmp.sub("critic/config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen2ForTokenClassification");
  ModelConfig again_cfg;
  again_cfg.path = tmp.sub("critic");
  auto again = build_model(again_cfg, "value_model");
  EXPECT_TRUE(torch::equal(again->named_parameters()["score.weight"], params["score.weight"]));
  EXPECT_TRUE(torch::allclose(again->forward(in, {}, nullptr).values, out.values));
}

TEST(Autocast, CpuBf16ForwardAndBackwardStayCloseToFp32) {
  auto model = builtin("llama-tiny", "language_model", /*checkpointing=*/true);
  auto in = padded_inputs(256);
  HeadOptions head;
  head.compute_entropy = true;
  torch::Tensor ref;
  {
    torch::NoGradGuard no_grad;
    ref = model->forward(in, head, nullptr).log_probs;
  }
  compat::AutocastScope autocast(torch::kCPU, torch::kBFloat16);
  auto out = model->forward(in, head, nullptr);
  EXPECT_EQ(out.log_probs.scalar_type(), torch::kFloat);
  EXPECT_LT((out.log_probs - ref).abs().max().item<double>(), 0.1);
  (out.log_probs.sum() + out.entropy.sum()).backward();
  for (auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
  }
}

TEST(Padding, LeftAndRightPaddingLeaveRealTokensUnchanged) {
  auto model = builtin("qwen3-tiny");
  torch::NoGradGuard no_grad;
  auto in = padded_inputs(256);
  HeadOptions head;
  auto batched = model->forward(in, head, nullptr).log_probs;
  // Row 1: real tokens 4..8 (left padded). Row 2: real tokens 0..5 (right padded).
  auto alone = [&](int64_t row, int64_t start, int64_t len) {
    auto ids = in.input_ids[row].narrow(0, start, len).unsqueeze(0);
    return model->forward({ids, torch::Tensor(), torch::Tensor()}, head, nullptr).log_probs[0];
  };
  EXPECT_LT((batched[1].narrow(0, 4, 5) - alone(1, 4, 5)).abs().max().item<double>(), 1e-5);
  EXPECT_LT((batched[2].narrow(0, 0, 6) - alone(2, 0, 6)).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace models
}  // namespace enginery
