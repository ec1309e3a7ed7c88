#pragma once
// A small decoder LM for the FSDP tests (the real llama/qwen models live in models/). It implements the same
// models::DecoderModel interface: unit 0 embeddings, units 1..L pre-norm blocks (causal single-head attention +
// MLP), the last unit the final norm and the head (lm_head, tied to the embeddings, or a value head).
// `probe` sees every unit's first matmul output, so tests can observe the dtype the forward computes in.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/decoder_model.h"
#include "models/packed_sequences.h"

namespace enginery {
namespace fsdp_test {

struct TinyConfig {
  int64_t vocab = 64;
  int64_t hidden = 16;
  int64_t layers = 2;
  bool tied = false;
  bool value_head = false;
};

struct RmsNormImpl : torch::nn::Module {
  explicit RmsNormImpl(int64_t dim) { weight = register_parameter("weight", torch::ones({dim})); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto xf = x.to(torch::kFloat);
    auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6);
    return (y * weight).to(x.scalar_type());
  }
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t h)
      : norm1(register_module("input_layernorm", RmsNorm(h))),
        q(register_module("q_proj", torch::nn::Linear(h, h))),
        // No key bias: its gradient is exactly zero (softmax is shift invariant), which leaves Adam amplifying noise.
        k(register_module("k_proj", torch::nn::Linear(torch::nn::LinearOptions(h, h).bias(false)))),
        v(register_module("v_proj", torch::nn::Linear(h, h))),
        o(register_module("o_proj", torch::nn::Linear(torch::nn::LinearOptions(h, h).bias(false)))),
        norm2(register_module("post_attention_layernorm", RmsNorm(h))),
        up(register_module("up_proj", torch::nn::Linear(torch::nn::LinearOptions(h, 2 * h).bias(false)))),
        down(register_module("down_proj", torch::nn::Linear(torch::nn::LinearOptions(2 * h, h).bias(false)))) {}

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask, torch::Tensor* first_matmul) {
    auto hN = norm1(x);
    auto qq = q(hN);
    if (first_matmul) *first_matmul = qq;
    auto scores = torch::matmul(qq, k(hN).transpose(1, 2)) / std::sqrt(static_cast<double>(x.size(-1)));
    scores = scores.to(torch::kFloat).masked_fill(mask.logical_not(), -1e9);
    auto attn = torch::softmax(scores, -1).to(qq.scalar_type());
    auto x1 = x + o(torch::matmul(attn, v(hN))).to(x.scalar_type());
    return x1 + down(torch::silu(up(norm2(x1)))).to(x.scalar_type());
  }
  RmsNorm norm1;
  torch::nn::Linear q, k, v, o;
  RmsNorm norm2;
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

struct HeadImpl : torch::nn::Module {
  HeadImpl(const TinyConfig& c) : norm(register_module("norm", RmsNorm(c.hidden))) {
    if (c.value_head) {
      proj = register_module("value_head", torch::nn::Linear(c.hidden, 1));
    } else if (!c.tied) {
      proj = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.hidden, c.vocab).bias(false)));
    }
  }
  RmsNorm norm;
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(Head);

class TinyDecoder : public models::DecoderModel {
 public:
  explicit TinyDecoder(TinyConfig c) : config_(c) {
    embed_ = register_module("embed_tokens", torch::nn::Embedding(c.vocab, c.hidden));
    for (int64_t i = 0; i < c.layers; ++i) layers_.push_back(register_module("layers_" + std::to_string(i), Block(c.hidden)));
    head_ = register_module("head", Head(c));
  }

  std::vector<models::Unit> units() override {
    std::vector<models::Unit> u{{"embed", embed_.ptr()}};
    for (size_t i = 0; i < layers_.size(); ++i) u.push_back({"layers." + std::to_string(i), layers_[i].ptr()});
    u.push_back({"head", head_.ptr()});
    return u;
  }

  ModelOutput forward(const models::ModelInputs& in, const models::HeadOptions& opts,
                      models::UnitHooks* hooks) override {
    if (in.cu_seqlens.defined()) {  // packed: computed padded, outputs in verl's alignment (models/packed_sequences.h)
      const auto packed = models::pack_sequences(in.input_ids, in.cu_seqlens, in.position_ids);
      models::ModelInputs padded;
      padded.input_ids = models::to_padded(packed.input_ids[0], packed);
      padded.attention_mask = models::to_padded(torch::ones({packed.tokens()}, padded.input_ids.options()), packed);
      return models::outputs_from_padded(forward(padded, opts, hooks), packed);
    }
    const int64_t T = in.input_ids.size(1);
    const auto bool_opts = in.input_ids.options().dtype(torch::kBool);
    auto causal = torch::ones({T, T}, bool_opts).tril();
    const auto real = in.attention_mask.to(torch::kBool);
    auto mask = causal.unsqueeze(0) & real.unsqueeze(1);  // [B, T, T]
    mask = mask | torch::eye(T, bool_opts).unsqueeze(0);  // padded rows attend to themselves
    size_t unit = 0;
    if (hooks) hooks->pre_forward(unit);
    auto x = embed_(in.input_ids);
    if (probe) probe(unit, x);
    if (hooks) hooks->post_forward(unit, {x});
    for (auto& layer : layers_) {
      ++unit;
      if (hooks) hooks->pre_forward(unit);
      torch::Tensor first;
      x = layer->forward(x, mask, &first);
      if (probe) probe(unit, first);
      if (hooks) hooks->post_forward(unit, {x});
    }
    ++unit;
    if (hooks) hooks->pre_forward(unit);
    auto h = head_->norm(x);
    ModelOutput out;
    if (config_.value_head) {
      auto v = head_->proj(h);
      if (probe) probe(unit, v);
      out.values = v.squeeze(-1).to(torch::kFloat) * real.to(torch::kFloat);
    } else {
      auto logits = config_.tied ? torch::matmul(h, embed_->weight.t()) : head_->proj(h);
      if (probe) probe(unit, logits);
      auto logp = torch::log_softmax(logits.to(torch::kFloat), -1);  // [B, T, V]
      auto lp = torch::zeros_like(in.input_ids, logp.options());
      auto next = logp.narrow(1, 0, T - 1).gather(-1, in.input_ids.narrow(1, 1, T - 1).unsqueeze(-1)).squeeze(-1);
      // As CausalLM: 0 where a token and the one before it are not both real.
      auto pair = torch::cat({torch::zeros_like(real.narrow(1, 0, 1)),
                              real.narrow(1, 0, T - 1).logical_and(real.narrow(1, 1, T - 1))},
                             1)
                      .to(torch::kFloat);
      out.log_probs = torch::cat({lp.narrow(1, 0, 1), next}, 1) * pair;
      if (opts.compute_entropy) {
        auto ent = -(logp.exp() * logp).sum(-1).narrow(1, 0, T - 1);
        out.entropy = torch::cat({lp.narrow(1, 0, 1), ent}, 1) * pair;
      }
    }
    if (hooks) hooks->post_forward(unit, {out.values.defined() ? out.values : out.log_probs});
    return out;
  }

  std::string hf_model_type() const override { return "tiny"; }
  bool tied_embeddings() const override { return config_.tied && !config_.value_head; }

  std::function<void(size_t unit, const torch::Tensor& first_matmul)> probe;

 private:
  TinyConfig config_;
  torch::nn::Embedding embed_{nullptr};
  std::vector<Block> layers_;
  Head head_{nullptr};
};

}  // namespace fsdp_test
}  // namespace enginery
