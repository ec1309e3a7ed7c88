#pragma once
// The building blocks of llama / qwen2 / qwen3 / qwen3_moe decoders, with the submodule and parameter names of
// transformers (self_attn.q_proj, mlp.gate_proj, input_layernorm, ...), so named_parameters() yields HF names.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/fp8_linear.h"
#include "models/model_args.h"
#include "models/packed_sequences.h"
#include "models/sequence_parallel.h"

namespace enginery {
namespace models {

class KVCache;  // models/kv_cache.h

// How a forward of `module` uses its FP8 amax histories: a recomputation replays, a training forward records, an
// eval forward (module.eval()) only reads.
inline Fp8HistoryUse fp8_history_use(const torch::nn::Module& module, bool recomputing) {
  if (recomputing) return Fp8HistoryUse::kReplay;
  return module.is_training() ? Fp8HistoryUse::kRecord : Fp8HistoryUse::kRead;
}
// The histories fp8_linears gets for a call site: the site's under delayed scaling, none (tensor-wise) otherwise.
inline Fp8SiteHistory* fp8_site_history(Fp8Recipe recipe, Fp8SiteHistory& site) {
  return recipe == Fp8Recipe::kDelayed ? &site : nullptr;
}

// y = w * (x / rms(x)), computed in fp32 and cast back to the input dtype before the weight, as transformers does.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Rotary tables for a batch: cos/sin [B, T, head_dim] in fp32 from position_ids [B, T].
struct RopeTables {
  torch::Tensor cos, sin;
};
torch::Tensor rope_inv_freq(const ModelArgs& args);  // [head_dim / 2] fp32, with the configured scaling
RopeTables rope_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids);

// What backward recomputes of each decoder layer instead of keeping it from the forward
// (model.enable_gradient_checkpointing, [engine.<backend>] gradient_checkpointing_policy; docs/ARCHITECTURE.md,
// "Activation checkpointing").
enum class Recompute {
  kNothing,  // every activation kept
  kLayer,    // only the layer's input kept; backward runs the whole layer again ("layer")
  kMlp,      // attention's activations kept; backward runs the MLP block again: its norm, the gate/up GEMMs and
             // SwiGLU, not the down GEMM ("mlp")
};
// The policy named by the config: `enabled` false is kNothing; `policy` "layer" or "mlp", else an error naming `key`
// (the config field) and the values. A policy other than "layer" with checkpointing off is refused, not ignored.
Recompute recompute_policy(bool enabled, const std::string& policy, const std::string& key);

// What every layer of one forward shares: rotary tables and the attention mask.
struct AttentionContext {
  RopeTables rope;  // in the dtype of the embeddings (what enters the layers)
  torch::Tensor mask;  // bool [B, 1, T, T] (true = may attend) or undefined: plain causal attention
  PackedSequences packed;  // defined: the hidden states are one packed row [1, N, hidden] (model.use_remove_padding)
  // With `packed`: the row is this rank's slice of the packed tokens, attention exchanges heads over the group
  // (models/sequence_parallel.h); `packed` then covers the whole padded row.
  const SequenceParallelGroup* sequence_parallel = nullptr;
  Recompute recompute = Recompute::kNothing;
  // Set while backward recomputes a checkpointed region: only the region's graph is differentiated, its output
  // value is never read, so the region's last GEMM (the MLP's down projection) is skipped (its backward still runs).
  bool recomputing = false;
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& args);
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& ctx);
  // Incremental decoding (models/generation.h): x [B, T, hidden] are the T tokens after the cache's; their keys
  // and values are appended to `cache` (layer `layer`) and the queries attend to all cached ones. ctx.mask is
  // required: bool [B, 1, T, cache.length() + T]. Inference only (no packed rows, no checkpointing).
  torch::Tensor forward_cached(const torch::Tensor& x, const AttentionContext& ctx, KVCache& cache, size_t layer);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qwen3 only
  Fp8Recipe fp8 = Fp8Recipe::kOff;  // the projections through models/fp8_linear.h (q/k/v as one group)

 private:
  Fp8SiteHistory qkv_fp8_, o_fp8_;  // the amax histories of the two fp8_linears sites (Fp8Recipe::kDelayed)

  struct QKV {
    torch::Tensor q, k, v;  // q [B, heads, T, D] and k [B, kv_heads, T, D] after RoPE; v [B, kv_heads, T, D]
  };
  QKV project(const torch::Tensor& x, const RopeTables& rope, Fp8HistoryUse use);
  torch::Tensor project_out(const torch::Tensor& x, Fp8HistoryUse use);  // o_proj

  int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelArgs& args);
  // recomputing (AttentionContext::recomputing): the output's value is not needed, only its backward, so the down
  // GEMM is not run and silu(gate) * up is kept for its backward (a recomputed region's activations live only
  // while its backward runs, so keeping it costs nothing at the peak).
  torch::Tensor forward(const torch::Tensor& x, bool recomputing = false);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Fp8Recipe fp8 = Fp8Recipe::kOff;  // the projections through models/fp8_linear.h (gate/up as one group)

 private:
  Fp8SiteHistory gate_up_fp8_, down_fp8_;  // the amax histories of the two fp8_linears sites (Fp8Recipe::kDelayed)
};
TORCH_MODULE(MLP);

class SparseMoeBlockImpl;  // models/moe.h

class DecoderLayerImpl : public torch::nn::Module {
 public:
  // Layer `index` (0-based) of the model: its MLP is sparse where is_moe_layer says so (qwen3_moe).
  DecoderLayerImpl(const ModelArgs& args, int64_t index);
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& ctx);
  // The MLP block, mlp(post_attention_layernorm(h)) without the residual, and the parameters it reads (what
  // Recompute::kMlp checkpoints).
  torch::Tensor mlp_block(const torch::Tensor& h, const AttentionContext& ctx);
  std::vector<torch::Tensor> mlp_block_parameters();
  // The same over the tokens after `cache`'s (AttentionImpl::forward_cached).
  torch::Tensor forward_cached(const torch::Tensor& x, const AttentionContext& ctx, KVCache& cache, size_t layer);

  // The experts of a sparse layer have no FP8 GEMMs: any recipe but kOff is refused for it.
  void set_fp8_recipe(Fp8Recipe recipe);

  Attention self_attn{nullptr};
  MLP mlp{nullptr};                           // a dense layer's MLP, registered as "mlp"
  std::shared_ptr<SparseMoeBlockImpl> moe;    // a sparse layer's, registered as "mlp" instead
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// Runs `layer` keeping only its input for backward; backward recomputes the layer (under the forward's autocast
// state) and differentiates it. The layer's parameters are read again at backward time, so an engine that frees
// them after forward must have gathered them before the layer's backward (it does, from its output-grad hook).
torch::Tensor checkpointed_layer_forward(DecoderLayerImpl& layer, const torch::Tensor& x, const AttentionContext& ctx);
// The same for the layer's MLP block (DecoderLayerImpl::mlp_block) over h, the hidden states after attention.
torch::Tensor checkpointed_mlp_block(DecoderLayerImpl& layer, const torch::Tensor& h, const AttentionContext& ctx);

}  // namespace models
}  // namespace enginery
