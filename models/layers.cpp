#include "models/layers.h"

#include <cmath>

#include "support/torch_compat.h"
#include "host_api/error.h"
#include "models/fp8_linear.h"
#include "models/fused_ops.h"
#include "models/kv_cache.h"
#include "models/moe.h"

namespace enginery {
namespace models {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // One kernel each way, saving only x and the per-row rstd instead of three fp32 copies of x. It rounds once,
  // after the weight, where transformers rounds x * rstd to x's dtype and then multiplies by the weight in that
  // dtype: the same function up to one bf16 rounding.
  if (fused_rms_norm_applies(x, weight)) return compat::rms_norm(x, weight, eps_);
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * h.to(x.scalar_type());
}

Recompute recompute_policy(bool enabled, const std::string& policy, const std::string& key) {
  static const char* const kPolicies = "layer, mlp";
  Recompute chosen;
  if (policy == "layer") {
    chosen = Recompute::kLayer;
  } else if (policy == "mlp") {
    chosen = Recompute::kMlp;
  } else {
    throw EngineryError("unknown policy '" + policy + "'", key, kPolicies);
  }
  if (!enabled && chosen != Recompute::kLayer) {
    throw EngineryError(key + " = " + policy +
                            " chooses what checkpointing recomputes, but model.enable_gradient_checkpointing is false",
                        key,
                        "layer (the default) with checkpointing off; any of " + std::string(kPolicies) +
                            " with model.enable_gradient_checkpointing = true");
  }
  return enabled ? chosen : Recompute::kNothing;
}

torch::Tensor rope_inv_freq(const ModelArgs& args) {
  const int64_t d = args.head_dim;
  auto inv = 1.0 / torch::pow(args.rope.theta, torch::arange(0, d, 2, torch::kInt64).to(torch::kFloat) / double(d));
  if (args.rope.type == "linear") return inv / args.rope.factor;
  if (args.rope.type != "llama3") return inv;
  // Llama 3.1: long wavelengths are divided by `factor`, short ones kept, and the band between blended.
  const auto& r = args.rope;
  const double old_len = static_cast<double>(r.original_max_position_embeddings);
  const double low_wavelen = old_len / r.low_freq_factor;
  const double high_wavelen = old_len / r.high_freq_factor;
  auto wavelen = 2.0 * M_PI / inv;
  auto scaled = torch::where(wavelen > low_wavelen, inv / r.factor, inv);
  auto smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  auto smoothed = (1.0 - smooth) * scaled / r.factor + smooth * scaled;
  auto medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

RopeTables rope_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids) {
  auto freqs = position_ids.to(torch::kFloat).unsqueeze(-1) * inv_freq.to(position_ids.device()).view({1, 1, -1});
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x [B, T, heads, D] (q or k as projected); cos/sin [B, T, D]. Returns [B, heads, T, D] (a transposed view on
// the fused path, as transformers hands SDPA; a contiguous tensor otherwise).
torch::Tensor apply_rope(const torch::Tensor& x_bthd, const RopeTables& rope) {
  if (fused_rope_applies(x_bthd)) return models::rope(x_bthd, rope.cos, rope.sin).transpose(1, 2);
  auto x = x_bthd.transpose(1, 2);
  auto cos = rope.cos.unsqueeze(1).to(x.scalar_type());
  auto sin = rope.sin.unsqueeze(1).to(x.scalar_type());
  return x * cos + rotate_half(x) * sin;
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelArgs& a)
    : heads_(a.num_attention_heads), kv_heads_(a.num_key_value_heads), head_dim_(a.head_dim) {
  const bool qkv_bias = a.attention_bias;  // always true for qwen2 (see model_args.cpp)
  const bool o_bias = (a.model_type == "llama" || a.model_type == "qwen3_moe") && a.attention_bias;
  using torch::nn::LinearOptions;
  q_proj = register_module("q_proj", torch::nn::Linear(LinearOptions(a.hidden_size, heads_ * head_dim_).bias(qkv_bias)));
  k_proj = register_module("k_proj", torch::nn::Linear(LinearOptions(a.hidden_size, kv_heads_ * head_dim_).bias(qkv_bias)));
  v_proj = register_module("v_proj", torch::nn::Linear(LinearOptions(a.hidden_size, kv_heads_ * head_dim_).bias(qkv_bias)));
  o_proj = register_module("o_proj", torch::nn::Linear(LinearOptions(heads_ * head_dim_, a.hidden_size).bias(o_bias)));
  if (a.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, a.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, a.rms_norm_eps));
  }
}

AttentionImpl::QKV AttentionImpl::project(const torch::Tensor& x, const RopeTables& rope, Fp8HistoryUse use) {
  const int64_t b = x.size(0), t = x.size(1);
  const auto qkv = fp8 != Fp8Recipe::kOff ? fp8_linears(x, {q_proj, k_proj, v_proj}, fp8_site_history(fp8, qkv_fp8_), use)
                               : std::vector<torch::Tensor>{q_proj(x), k_proj(x), v_proj(x)};
  auto q = qkv[0].view({b, t, heads_, head_dim_});
  auto k = qkv[1].view({b, t, kv_heads_, head_dim_});
  auto v = qkv[2].view({b, t, kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  return {apply_rope(q, rope), apply_rope(k, rope), v};
}

torch::Tensor AttentionImpl::project_out(const torch::Tensor& x, Fp8HistoryUse use) {
  return fp8 != Fp8Recipe::kOff ? fp8_linears(x, {o_proj}, fp8_site_history(fp8, o_fp8_), use)[0] : o_proj(x);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionContext& ctx) {
  const int64_t b = x.size(0), t = x.size(1);
  const Fp8HistoryUse use = fp8_history_use(*this, ctx.recomputing);
  auto qkv = project(x, ctx.rope, use);
  auto q = std::move(qkv.q), k = std::move(qkv.k), v = std::move(qkv.v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  if (ctx.packed.defined()) {
    // [1, heads, N, D] -> the varlen layout [N, heads, D]; kv heads stay unexpanded (the kernels read them).
    const auto dtype = v.scalar_type();
    auto q_rows = q[0].transpose(0, 1).to(dtype), k_rows = k[0].transpose(0, 1).to(dtype);
    auto out = ctx.sequence_parallel != nullptr
                   ? ulysses_causal_attention(*ctx.sequence_parallel, q_rows, k_rows, v[0].transpose(0, 1),
                                              ctx.packed, scale)
                   : packed_causal_attention(q_rows, k_rows, v[0].transpose(0, 1), ctx.packed, scale);
    return project_out(out.reshape({b, t, heads_ * head_dim_}), use);
  }
  // Under autocast q/k/v may differ in dtype (rope promotes); the fused kernels want one.
  const auto dtype = v.scalar_type();
  q = q.to(dtype);
  k = k.to(dtype);
  auto merge_heads = [&](const torch::Tensor& out) {
    return project_out(out.transpose(1, 2).reshape({b, t, heads_ * head_dim_}), use);
  };
  if (x.is_cuda() && !ctx.mask.defined()) {
    // k and v keep their kv_heads here: the fused kernels read kv head h / (heads / kv_heads) themselves, so no
    // expanded copies exist in the forward or are saved for backward.
    const auto forced = compat::sdpa_backend_from_env();
    if (forced != compat::SdpaBackend::kAuto) {
      return merge_heads(compat::sdpa_on_backend(forced, q, k, v, /*is_causal=*/true, scale));
    }
    if (kv_heads_ != heads_) {
      return merge_heads(compat::sdpa_gqa(q, k, v, /*is_causal=*/true, scale));
    }
  }
  if (kv_heads_ != heads_) {
    // Grouped-query attention: query head h reads kv head h / (heads / kv_heads), as transformers' repeat_kv.
    const int64_t rep = heads_ / kv_heads_;
    k = k.unsqueeze(2).expand({b, kv_heads_, rep, t, head_dim_}).reshape({b, heads_, t, head_dim_});
    v = v.unsqueeze(2).expand({b, kv_heads_, rep, t, head_dim_}).reshape({b, heads_, t, head_dim_});
  }
  return merge_heads(compat::sdpa(q, k, v, ctx.mask, /*is_causal=*/!ctx.mask.defined(), scale));
}

torch::Tensor AttentionImpl::forward_cached(const torch::Tensor& x, const AttentionContext& ctx, KVCache& cache,
                                            size_t layer) {
  if (!ctx.mask.defined()) throw EngineryError("a cached forward needs ctx.mask", "AttentionImpl::forward_cached");
  const int64_t b = x.size(0), t = x.size(1);
  auto qkv = project(x, ctx.rope, Fp8HistoryUse::kRead);  // inference: the histories are only read
  const auto dtype = qkv.v.scalar_type();
  auto kv = cache.append(layer, qkv.k, qkv.v);
  const int64_t s = kv.first.size(2), rep = heads_ / kv_heads_;
  // Grouped-query attention without copying the cache rep times: the rep query heads sharing kv head g
  // (h = g * rep + r, as transformers' repeat_kv pairs them) become rep * T query rows of head g, each row keeping
  // its token's mask row.
  auto q = qkv.q.to(dtype).reshape({b, kv_heads_, rep * t, head_dim_});
  auto mask = rep == 1 ? ctx.mask
                       : ctx.mask.unsqueeze(2).expand({b, 1, rep, t, s}).reshape({b, 1, rep * t, s});
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto out = compat::sdpa(q, kv.first, kv.second, mask, /*is_causal=*/false, scale);
  return project_out(out.reshape({b, heads_, t, head_dim_}).transpose(1, 2).reshape({b, t, heads_ * head_dim_}),
                     Fp8HistoryUse::kRead);
}

MLPImpl::MLPImpl(const ModelArgs& a) {
  using torch::nn::LinearOptions;
  gate_proj = register_module("gate_proj", torch::nn::Linear(LinearOptions(a.hidden_size, a.intermediate_size).bias(a.mlp_bias)));
  up_proj = register_module("up_proj", torch::nn::Linear(LinearOptions(a.hidden_size, a.intermediate_size).bias(a.mlp_bias)));
  down_proj = register_module("down_proj", torch::nn::Linear(LinearOptions(a.intermediate_size, a.hidden_size).bias(a.mlp_bias)));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x, bool recomputing) {
  if (fp8 != Fp8Recipe::kOff) {
    // The down projection is an FP8 GEMM of its own, so swiglu_down's fusion (a bf16 GEMM) does not apply; its
    // backward differs from a bf16 linear's, so it runs whole when recomputed too.
    const Fp8HistoryUse use = fp8_history_use(*this, recomputing);
    const auto gate_up = fp8_linears(x, {gate_proj, up_proj}, fp8_site_history(fp8, gate_up_fp8_), use);
    return fp8_linears(swiglu(gate_up[0], gate_up[1]), {down_proj}, fp8_site_history(fp8, down_fp8_), use)[0];
  }
  auto gate = gate_proj(x);
  auto up = up_proj(x);
  if (recomputing) return linear_output_unused(swiglu(gate, up), down_proj->weight, down_proj->bias);
  if (!down_proj->bias.defined() && fused_swiglu_down_applies(gate, up)) {
    return swiglu_down(gate, up, down_proj->weight);
  }
  return down_proj(swiglu(gate, up));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelArgs& a, int64_t index) {
  self_attn = register_module("self_attn", Attention(a));
  if (is_moe_layer(a, index)) {
    moe = register_module("mlp", std::make_shared<SparseMoeBlockImpl>(a));
  } else {
    mlp = register_module("mlp", MLP(a));
  }
  input_layernorm = register_module("input_layernorm", RMSNorm(a.hidden_size, a.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(a.hidden_size, a.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionContext& ctx) {
  RECORD_USER_SCOPE("decoder_layer::forward");
  auto h = x + self_attn->forward(input_layernorm(x), ctx);
  // A recomputation's context never asks for kMlp (CheckpointFunction builds it afresh), so no region nests.
  if (ctx.recompute == Recompute::kMlp) return h + checkpointed_mlp_block(*this, h, ctx);
  return h + mlp_block(h, ctx);
}

torch::Tensor DecoderLayerImpl::mlp_block(const torch::Tensor& h, const AttentionContext& ctx) {
  if (moe) return moe->forward(post_attention_layernorm(h));
  return mlp->forward(post_attention_layernorm(h), ctx.recomputing);
}

std::vector<torch::Tensor> DecoderLayerImpl::mlp_block_parameters() {
  auto params = post_attention_layernorm->parameters();
  for (const auto& p : moe ? moe->parameters() : mlp->parameters()) params.push_back(p);
  return params;
}

void DecoderLayerImpl::set_fp8_recipe(Fp8Recipe recipe) {
  if (moe && recipe != Fp8Recipe::kOff) {
    throw EngineryError("a qwen3_moe model's experts have no FP8 GEMMs (models/moe.h); turn FP8 off for it",
                        "[engine.<backend>] fp8", "off");
  }
  self_attn->fp8 = recipe;
  if (mlp) mlp->fp8 = recipe;
}

torch::Tensor DecoderLayerImpl::forward_cached(const torch::Tensor& x, const AttentionContext& ctx, KVCache& cache,
                                               size_t layer) {
  auto h = x + self_attn->forward_cached(input_layernorm(x), ctx, cache, layer);
  return h + (moe ? moe->forward(post_attention_layernorm(h)) : mlp->forward(post_attention_layernorm(h)));
}

}  // namespace models
}  // namespace enginery
