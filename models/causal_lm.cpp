#include "models/causal_lm.h"

#include "host_api/error.h"
#include "models/lm_head.h"
#include "models/packed_sequences.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {

void DecoderModel::set_fp8_recipe(Fp8Recipe recipe) {
  if (recipe != Fp8Recipe::kOff) {
    throw EngineryError("a " + hf_model_type() + " model built outside models::build_model has no FP8 matmuls " +
                            "(models/fp8_linear.h); turn them off for it",
                        "[engine.<backend>] fp8", "off");
  }
}

void CausalLM::set_fp8_recipe(Fp8Recipe recipe) {
  for (auto& layer : model_->layers) layer->set_fp8_recipe(recipe);
}

DecoderBodyImpl::DecoderBodyImpl(const ModelArgs& a) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(a.vocab_size, a.hidden_size));
  torch::nn::ModuleList list;
  for (int64_t i = 0; i < a.num_hidden_layers; ++i) {
    layers.emplace_back(a, i);
    list->push_back(layers.back());
  }
  register_module("layers", list);
  norm = register_module("norm", RMSNorm(a.hidden_size, a.rms_norm_eps));
}

HeadUnitImpl::HeadUnitImpl(RMSNorm norm, torch::nn::Linear head, const std::string& head_name) {
  register_module("norm", norm);
  if (head) register_module(head_name, head);
}

CausalLM::CausalLM(ModelArgs args, HeadKind head) : args_(std::move(args)), head_(head) {
  model_ = register_module("model", DecoderBody(args_));
  if (head_ == HeadKind::kValue) {
    // transformers' *ForTokenClassification with num_labels = 1 (what verl's critic loads): a biased linear.
    score_ = register_module("score", torch::nn::Linear(torch::nn::LinearOptions(args_.hidden_size, 1).bias(true)));
    head_unit_ = HeadUnit(model_->norm, score_, "score");
  } else if (!args_.tie_word_embeddings) {
    lm_head_ = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(args_.hidden_size, args_.vocab_size).bias(false)));
    head_unit_ = HeadUnit(model_->norm, lm_head_, "lm_head");
  } else {
    head_unit_ = HeadUnit(model_->norm, torch::nn::Linear(nullptr), "");
  }
  inv_freq_ = rope_inv_freq(args_);
}

std::vector<Unit> CausalLM::units() {
  std::vector<Unit> units;
  units.push_back({"embed", model_->embed_tokens.ptr()});
  for (size_t i = 0; i < model_->layers.size(); ++i) {
    units.push_back({"layers." + std::to_string(i), model_->layers[i].ptr()});
  }
  units.push_back({"head", head_unit_.ptr()});
  return units;
}

torch::Tensor CausalLM::output_embedding_weight() {
  return lm_head_ ? lm_head_->weight : model_->embed_tokens->weight;
}

namespace {

// Bool [B, 1, T, S] for the last T of S tokens (valid [B, S]; T = S without a cache): causal, keys restricted to
// real tokens. Every query may always see itself, so rows of padding queries are never fully masked (a fully
// masked row would give NaN in softmax and in its gradient).
torch::Tensor padded_causal_mask(const torch::Tensor& valid, int64_t t) {
  const int64_t s = valid.size(1);
  auto opts = valid.options().dtype(torch::kBool);
  auto causal = torch::ones({t, s}, opts).tril(s - t);
  auto allowed = causal.unsqueeze(0).logical_and(valid.unsqueeze(1));
  auto self = torch::eye(t, s, opts);
  if (s != t) self = self.roll(s - t, 1);  // query i is token s - t + i
  allowed = allowed.logical_or(self.unsqueeze(0));
  return allowed.unsqueeze(1);
}

}  // namespace

ModelOutput CausalLM::forward(const ModelInputs& in, const HeadOptions& head, UnitHooks* hooks) {
  if (in.cu_seqlens.defined()) return forward_packed_input(in, head, hooks);
  const auto& ids = in.input_ids;
  if (ids.dim() != 2) {
    throw EngineryError("must be [batch, seq] (or [tokens] with cu_seqlens), got " + std::to_string(ids.dim()) +
                            " dimensions",
                        "input_ids");
  }
  const int64_t b = ids.size(0), t = ids.size(1);
  const auto device = ids.device();
  auto mask = in.attention_mask.defined() ? in.attention_mask.to(device) : torch::ones({b, t}, ids.options());
  auto valid = mask.to(torch::kBool);
  auto positions = in.position_ids.defined()
                       ? in.position_ids.to(device)
                       : (mask.to(torch::kLong).cumsum(-1) - 1).clamp_min(0);
  // Packed with model.use_remove_padding (or Ulysses): the packed path, its outputs moved to the padded layout.
  // Without padding there is nothing to take out: the dense path is the packed one. A micro-batch of padding only
  // (nothing to pack) runs dense too, so its units still run their collectives.
  const bool packed = in.sequence_parallel != nullptr || (in.remove_padding && !valid.all().item<bool>());
  if (packed && valid.any().item<bool>()) {
    const PackedBatch p = pack_batch(valid, ids, positions);
    return outputs_to_padded(in.sequence_parallel != nullptr ? ulysses_forward(p, head, hooks, *in.sequence_parallel)
                                                             : packed_forward(p, head, hooks),
                             p);
  }
  return padded_forward(ids, valid, positions, head, hooks);
}

ModelOutput CausalLM::forward_packed_input(const ModelInputs& in, const HeadOptions& head, UnitHooks* hooks) {
  const PackedBatch p = pack_sequences(in.input_ids, in.cu_seqlens, in.position_ids);
  const auto device = in.input_ids.device();
  if (p.tokens() == 0) {
    // No token at all: one padding position per sequence still runs through every unit (their collectives, as a
    // padded micro-batch of padding only); the outputs are empty.
    auto none = torch::zeros({std::max<int64_t>(p.rows, 1), 1}, torch::TensorOptions(device).dtype(torch::kLong));
    ModelOutput out = padded_forward(none, none.to(torch::kBool), none, head, hooks);
    for (auto* t : {&out.log_probs, &out.entropy, &out.values}) {
      if (t->defined()) *t = t->reshape({-1}).narrow(0, 0, 0);
    }
    return out;
  }
  if (in.sequence_parallel != nullptr) return ulysses_forward(p, head, hooks, *in.sequence_parallel);
  if (in.remove_padding) return packed_forward(p, head, hooks);
  // model.use_remove_padding off: the sequences right padded to [S, longest], the padded path, verl's alignment.
  auto ids = to_padded(p.input_ids[0], p);
  auto valid = to_padded(torch::ones({p.tokens()}, ids.options()), p).to(torch::kBool);
  auto positions = to_padded(p.position_ids[0], p);
  return outputs_from_padded(padded_forward(ids, valid, positions, head, hooks), p);
}

ModelOutput CausalLM::padded_forward(const torch::Tensor& ids, const torch::Tensor& valid,
                                     const torch::Tensor& positions, const HeadOptions& head, UnitHooks* hooks) {
  const int64_t b = ids.size(0), t = ids.size(1);
  const bool all_valid = valid.all().item<bool>();
  AttentionContext ctx;
  if (!all_valid) ctx.mask = padded_causal_mask(valid, t);
  auto h = body_forward(ids, positions, std::move(ctx), hooks);
  if (head_ == HeadKind::kValue) {
    return value_head(score_(h).squeeze(-1).to(torch::kFloat) * valid.to(torch::kFloat), hooks);
  }
  // Row (b, s) of the hidden states predicts token (b, s + 1); only pairs of real tokens are computed.
  const int64_t hidden = h.size(-1);
  auto h_rows = h.narrow(1, 0, t - 1).reshape({-1, hidden});
  auto targets = ids.narrow(1, 1, t - 1).reshape({-1});
  // Without padding every pair is real: no nonzero() (a host synchronisation) and no gather of the rows.
  torch::Tensor rows;
  if (!all_valid) {
    auto pair_valid = valid.narrow(1, 0, t - 1).logical_and(valid.narrow(1, 1, t - 1)).reshape({-1});
    rows = pair_valid.nonzero().squeeze(1);
    h_rows = h_rows.index_select(0, rows);
    targets = targets.index_select(0, rows);
  }
  return language_head(h_rows, targets, head, hooks, [&](const torch::Tensor& values) {
    auto flat = all_valid ? values : torch::zeros({b * (t - 1)}, values.options()).index_copy(0, rows, values);
    return torch::cat({torch::zeros({b, 1}, values.options()), flat.view({b, t - 1})}, 1);
  });
}

ModelOutput CausalLM::packed_forward(const PackedBatch& packed, const HeadOptions& head, UnitHooks* hooks) {
  AttentionContext ctx;
  ctx.packed = packed.sequences;
  auto h = body_forward(packed.input_ids, packed.position_ids, std::move(ctx), hooks)[0];  // [N, hidden]
  if (head_ == HeadKind::kValue) return value_head(score_(h).squeeze(-1).to(torch::kFloat), hooks);
  // Row i predicts token i + 1: only the rows with a next token in their sequence are computed.
  const auto& rows = packed.pair_rows;
  auto targets = packed.input_ids[0].index_select(0, rows + 1);
  const int64_t n = packed.tokens();
  return language_head(h.index_select(0, rows), targets, head, hooks, [&](const torch::Tensor& values) {
    return torch::zeros({n}, values.options()).index_copy(0, rows, values);
  });
}

torch::Tensor CausalLM::body_forward(const torch::Tensor& ids, const torch::Tensor& positions, AttentionContext ctx,
                                     UnitHooks* hooks) {
  ctx.rope = rope_for(positions);
  ctx.recompute = recompute_;

  size_t unit = 0;
  if (hooks) hooks->pre_forward(unit);
  auto h = model_->embed_tokens(ids);
  if (hooks) hooks->post_forward(unit, {h});
  for (auto& layer : model_->layers) {
    ++unit;
    if (hooks) hooks->pre_forward(unit);
    h = recompute_ == Recompute::kLayer ? checkpointed_layer_forward(*layer, h, ctx) : layer->forward(h, ctx);
    if (hooks) hooks->post_forward(unit, {h});
  }
  if (hooks) hooks->pre_forward(unit + 1);  // the head unit: its post_forward is the head's
  return model_->norm(h);
}

RopeTables CausalLM::rope_for(const torch::Tensor& positions) {
  auto rope = rope_tables(inv_freq_.to(positions.device()), positions);
  // Cast once per forward to the embeddings' dtype, as transformers casts its fp32 tables to the dtype of the
  // hidden states entering the layers; under FSDP that is param_dtype, the dtype q and k have, so the layers'
  // own cast to q's dtype becomes a no-op instead of two casts per layer.
  const auto embed_dtype = model_->embed_tokens->weight.scalar_type();
  rope.cos = rope.cos.to(embed_dtype);
  rope.sin = rope.sin.to(embed_dtype);
  return rope;
}

torch::Tensor CausalLM::forward_cached(const torch::Tensor& ids, const torch::Tensor& attention_mask,
                                       KVCache& cache) {
  const int64_t t = ids.dim() == 2 ? ids.size(1) : 0, s = attention_mask.dim() == 2 ? attention_mask.size(1) : -1;
  if (t == 0 || s != cache.length() + t || attention_mask.size(0) != ids.size(0)) {
    throw EngineryError("ids must be [batch, new tokens] and attention_mask [batch, " +
                            std::to_string(cache.length()) + " cached + new tokens]",
                        "CausalLM::forward_cached");
  }
  auto mask = attention_mask.to(torch::kLong);
  AttentionContext ctx;
  ctx.rope = rope_for((mask.cumsum(-1) - 1).clamp_min(0).narrow(1, s - t, t));
  ctx.mask = padded_causal_mask(mask.to(torch::kBool), t);
  auto h = model_->embed_tokens(ids);
  for (size_t i = 0; i < model_->layers.size(); ++i) h = model_->layers[i]->forward_cached(h, ctx, cache, i);
  cache.advance(t);
  return model_->norm(h);
}

torch::Tensor CausalLM::next_token_logits(const torch::Tensor& hidden) {
  if (head_ != HeadKind::kLanguageModel) {
    throw EngineryError("a value model has no next-token logits", "CausalLM::next_token_logits", "language_model");
  }
  return torch::matmul(hidden, output_embedding_weight().t()).to(torch::kFloat);
}

ModelOutput CausalLM::value_head(torch::Tensor values, UnitHooks* hooks) {
  ModelOutput out;
  out.values = std::move(values);
  if (hooks) hooks->post_forward(model_->layers.size() + 1, {out.values});
  return out;
}

ModelOutput CausalLM::language_head(const torch::Tensor& h_rows, const torch::Tensor& targets,
                                    const HeadOptions& head, UnitHooks* hooks,
                                    const std::function<torch::Tensor(const torch::Tensor&)>& place) {
  const auto weight = output_embedding_weight();
  const auto device = h_rows.device().type();
  const auto compute_dtype = compat::autocast_enabled(device) ? compat::autocast_dtype(device) : weight.scalar_type();
  // logits / T = (hidden / T) @ W^T: the chunked head's logits never exist whole, so the scale goes on its input.
  const torch::Tensor scaled = head.temperature == 1.0 ? h_rows : h_rows / head.temperature;
  auto r = chunked_log_probs(scaled, weight, targets, head.compute_entropy, compute_dtype, head.chunk_tokens);
  ModelOutput out;
  out.log_probs = place(r.log_probs);
  std::vector<torch::Tensor> outputs{out.log_probs};
  if (head.compute_entropy) {
    out.entropy = place(r.entropy);
    outputs.push_back(out.entropy);
  }
  if (hooks) hooks->post_forward(model_->layers.size() + 1, outputs);
  return out;
}

}  // namespace models
}  // namespace enginery
