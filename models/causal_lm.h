#pragma once
// CausalLM: the DecoderModel of llama / qwen2 / qwen3 with a language-model head (per-token log-probs, entropy) or
// a value head (score: hidden -> 1). Parameter names are transformers' (model.embed_tokens.weight,
// model.layers.<i>.*, model.norm.weight, lm_head.weight | score.weight, score.bias).
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/decoder_model.h"
#include "models/kv_cache.h"
#include "models/layers.h"
#include "models/model_args.h"

namespace enginery {
namespace models {

enum class HeadKind { kLanguageModel, kValue };

// transformers' *Model: embeddings, layers, final norm.
class DecoderBodyImpl : public torch::nn::Module {
 public:
  explicit DecoderBodyImpl(const ModelArgs& args);
  torch::nn::Embedding embed_tokens{nullptr};
  std::vector<DecoderLayer> layers;
  RMSNorm norm{nullptr};
};
TORCH_MODULE(DecoderBody);

// The last unit: the final norm plus the head. A module of its own (not registered in the model, so names in the
// model stay HF's) that owns the same norm and head submodules; with tied embeddings it owns only the norm.
class HeadUnitImpl : public torch::nn::Module {
 public:
  HeadUnitImpl(RMSNorm norm, torch::nn::Linear head, const std::string& head_name);
};
TORCH_MODULE(HeadUnit);

class CausalLM : public DecoderModel {
 public:
  CausalLM(ModelArgs args, HeadKind head);

  std::vector<Unit> units() override;
  ModelOutput forward(const ModelInputs& inputs, const HeadOptions& head, UnitHooks* hooks) override;
  std::string hf_model_type() const override { return args_.model_type; }
  bool tied_embeddings() const override { return head_ == HeadKind::kLanguageModel && args_.tie_word_embeddings; }

  const ModelArgs& args() const { return args_; }
  HeadKind head_kind() const { return head_; }
  void set_gradient_checkpointing(bool on) { recompute_ = on ? Recompute::kLayer : Recompute::kNothing; }
  void set_recompute(Recompute policy) { recompute_ = policy; }
  void set_fp8_recipe(Fp8Recipe recipe) override;
  void check_sequence_parallel(int64_t size, int64_t world, const std::string& key) const override;
  bool gradient_checkpointing() const { return recompute_ != Recompute::kNothing; }
  Recompute recompute() const { return recompute_; }

  // The [V, H] matrix the language-model head multiplies with (lm_head.weight, or the embeddings when tied).
  torch::Tensor output_embedding_weight();

  // Incremental decoding (models/generation.h), without hooks (an unsharded model). Runs ids [B, T], the tokens
  // after the cache's, appending their keys and values to `cache`; attention_mask [B, cache.length() + T] covers
  // the cached and the new tokens (1 = real): positions are its running count (cumsum - 1, as forward), keys where
  // it is 0 are never attended. Returns the hidden states after the final norm, [B, T, hidden].
  torch::Tensor forward_cached(const torch::Tensor& ids, const torch::Tensor& attention_mask, KVCache& cache);
  // Logits [.., V] in fp32 of hidden states after the final norm (language_model only): the full-vocabulary row
  // the log-prob head never materialises, for the one position per sequence a sampler needs.
  torch::Tensor next_token_logits(const torch::Tensor& hidden);
  DecoderBody body() { return model_; }

 private:
  // The padded path: ids, valid, positions [B, T]; outputs [B, T], log_probs[b, t] for token t itself.
  ModelOutput padded_forward(const torch::Tensor& ids, const torch::Tensor& valid, const torch::Tensor& positions,
                             const HeadOptions& head, UnitHooks* hooks);
  // The packed path, the one owner of the packed computation: the tokens of `packed` as one row (N > 0), outputs [N]
  // in verl's alignment (models/packed_sequences.h's [Note: packed rows and their padded layout]). A padded input
  // with model.use_remove_padding comes here too and moves its outputs to its padded layout.
  ModelOutput packed_forward(const PackedBatch& packed, const HeadOptions& head, UnitHooks* hooks);
  // Ulysses sequence parallelism: this rank's slice of the packed tokens through the model, the heads' outputs
  // gathered over the group (causal_lm_ulysses.cpp; [Note: Ulysses token and head split]); outputs as packed_forward.
  ModelOutput ulysses_forward(const PackedBatch& packed, const HeadOptions& head, UnitHooks* hooks,
                              const SequenceParallelGroup& group);
  // A packed input (cu_seqlens defined): the packed or Ulysses path, or padded internally (remove_padding off).
  ModelOutput forward_packed_input(const ModelInputs& inputs, const HeadOptions& head, UnitHooks* hooks);
  // Embeddings, decoder layers and the final norm over ids [B, T] (or one packed row [1, N]), each unit between its
  // hooks; the head unit's pre_forward is called, its post_forward is the head's.
  torch::Tensor body_forward(const torch::Tensor& ids, const torch::Tensor& positions, AttentionContext ctx,
                             UnitHooks* hooks);
  // Rotary tables for `positions` in the dtype of the embeddings.
  RopeTables rope_for(const torch::Tensor& positions);
  ModelOutput value_head(torch::Tensor values, UnitHooks* hooks);
  // Log-probs (and entropy) of `targets` from the hidden rows predicting them; `place` puts one value per row into
  // the output's layout.
  ModelOutput language_head(const torch::Tensor& h_rows, const torch::Tensor& targets, const HeadOptions& head,
                            UnitHooks* hooks, const std::function<torch::Tensor(const torch::Tensor&)>& place);

  ModelArgs args_;
  HeadKind head_;
  Recompute recompute_ = Recompute::kNothing;
  DecoderBody model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // untied language_model only
  torch::nn::Linear score_{nullptr};    // value_model only
  HeadUnit head_unit_{nullptr};
  torch::Tensor inv_freq_;  // not a parameter or buffer: derived from the config, never saved
};

}  // namespace models
}  // namespace enginery
