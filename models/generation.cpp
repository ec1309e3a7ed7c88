#include "models/generation.h"

#include <cmath>
#include <limits>
#include <string>

#include "host_api/error.h"
#include "models/generation_settings.h"
#include "models/kv_cache.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {
namespace {

void check_params(const SamplingParams& p) {
  auto field = [](const char* key) { return SettingName{key, "SamplingParams"}; };
  check_sampling_values(p, {field("temperature"), field("top_p"), field("top_k"), field("max_new_tokens"),
                            field("dtype")});
}

// Left padding only: the last column must be a real token of every row, since it is the one whose logits pick
// the first response token, and every row needs one.
void check_prompts(CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask, int64_t pad_id) {
  const char* where = "generate";
  if (model.head_kind() != HeadKind::kLanguageModel) {
    throw EngineryError("a value model cannot generate", where, "language_model");
  }
  if (ids.dim() != 2 || ids.size(0) < 1 || ids.size(1) < 1 || !mask.defined() || mask.sizes() != ids.sizes()) {
    throw EngineryError("prompt_ids and prompt_mask must both be [batch, prompt length], non-empty", where);
  }
  auto valid = mask.to(torch::kBool);
  const int64_t p = ids.size(1);
  // Once real, every later token is real: no real token is followed by a pad.
  const bool real_then_pad =
      p > 1 && valid.narrow(1, 0, p - 1).logical_and(valid.narrow(1, 1, p - 1).logical_not()).any().item<bool>();
  if (real_then_pad || !valid.select(1, p - 1).all().item<bool>()) {
    throw EngineryError("prompts must be left-padded, each with at least one real token", "prompt_mask",
                        "rows of 0s then 1s, ending in 1");
  }
  const int64_t vocab = model.args().vocab_size;
  auto real_ids = ids.masked_select(valid);
  if (real_ids.lt(0).logical_or(real_ids.ge(vocab)).any().item<bool>()) {
    throw EngineryError("a prompt token id is outside the vocabulary", "prompt_ids",
                        "0 .. " + std::to_string(vocab - 1));
  }
  // Finished sequences feed pad_token_id through the embeddings.
  if (pad_id < 0 || pad_id >= vocab) {
    throw EngineryError("pad_token_id = " + std::to_string(pad_id) + " is outside the vocabulary", "SamplingParams",
                        "0 .. " + std::to_string(vocab - 1));
  }
}

// logits [B, V] fp32 -> token ids [B]. Temperature first, then top-k, then top-p (nucleus), as transformers
// orders its warpers; the most likely token always survives, so top_k = 1 or a tiny top_p is greedy.
torch::Tensor sample_next(torch::Tensor logits, const SamplingParams& p, at::Generator& gen) {
  if (p.greedy) return logits.argmax(-1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (p.temperature != 1.0) logits = logits / p.temperature;
  if (p.top_k > 0 && p.top_k < logits.size(-1)) {
    auto kth = std::get<0>(logits.topk(p.top_k, -1)).narrow(-1, p.top_k - 1, 1);
    logits = logits.masked_fill(logits < kth, neg_inf);
  }
  if (p.top_p < 1.0) {
    auto sorted = logits.sort(-1, /*descending=*/true);
    auto probs = std::get<0>(sorted).softmax(-1);
    // A token goes when the more likely ones already hold top_p of the mass. The most likely one always stays: a
    // top_p below float32's range would otherwise compare as 0 and drop every token.
    auto drop_sorted = (probs.cumsum(-1) - probs) >= p.top_p;
    drop_sorted.select(-1, 0).fill_(false);
    auto drop = torch::zeros_like(drop_sorted).scatter(-1, std::get<1>(sorted), drop_sorted);
    logits = logits.masked_fill(drop, neg_inf);
  }
  return at::multinomial(logits.softmax(-1), 1, /*replacement=*/false, gen).squeeze(-1);
}

}  // namespace

GenerationResult generate(CausalLM& model, const torch::Tensor& prompt_ids, const torch::Tensor& prompt_mask,
                          const SamplingParams& params) {
  check_params(params);
  torch::NoGradGuard no_grad;
  const auto weight = model.output_embedding_weight();
  const auto device = weight.device();
  auto ids = prompt_ids.to(device, torch::kLong);
  auto prompt = prompt_mask.to(device, torch::kLong);
  check_prompts(model, ids, prompt, params.pad_token_id);
  // Whatever the caller put at padding (-1, say) never reaches the embeddings.
  ids = ids.masked_fill(prompt.logical_not(), params.pad_token_id);
  const int64_t b = ids.size(0), p = ids.size(1), max_new = params.max_new_tokens;

  KVCache cache(model.args(), b, p + max_new, weight.options());
  auto sequences = torch::full({b, p + max_new}, params.pad_token_id, ids.options());
  sequences.narrow(1, 0, p).copy_(ids);
  auto mask = torch::zeros({b, p + max_new}, ids.options());
  mask.narrow(1, 0, p).copy_(prompt);
  auto finished = torch::zeros({b}, ids.options().dtype(torch::kBool));
  at::Generator gen = compat::make_generator(device, params.seed);

  // Prefill: the whole prompt at once; its last position (a real token in every row) predicts the first token.
  auto hidden = model.forward_cached(ids, prompt, cache);
  int64_t n = 0;
  while (true) {
    auto logits = model.next_token_logits(hidden.select(1, hidden.size(1) - 1));
    auto next = sample_next(logits, params, gen).masked_fill(finished, params.pad_token_id);
    sequences.select(1, p + n).copy_(next);
    mask.select(1, p + n).copy_(finished.logical_not());
    if (params.eos_token_id >= 0) finished = finished.logical_or(next == params.eos_token_id);
    for (int64_t stop : params.stop_token_ids) finished = finished.logical_or(next == stop);
    ++n;
    // One host synchronisation per token: a batch whose sequences all stopped ends early.
    if (n == max_new || finished.all().item<bool>()) break;
    hidden = model.forward_cached(next.unsqueeze(1), mask.narrow(1, 0, p + n), cache);
  }

  GenerationResult out;
  out.sequences = sequences.narrow(1, 0, p + n).contiguous();
  out.attention_mask = mask.narrow(1, 0, p + n).contiguous();
  out.response_mask = out.attention_mask.narrow(1, p, n).contiguous();
  out.response_lengths = out.response_mask.sum(1);
  return out;
}

}  // namespace models
}  // namespace enginery
