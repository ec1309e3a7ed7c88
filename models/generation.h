#pragma once
// Batched incremental decoding with a KV cache for the llama / qwen2 / qwen3 CausalLM: the sampler of the RL loop
// and of `enginery generate` (docs/ARCHITECTURE.md, "Layers": models).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/causal_lm.h"

namespace enginery {
namespace models {

struct SamplingParams {
  int64_t max_new_tokens = 16;
  bool greedy = false;        // argmax; temperature, top_p and top_k are then ignored
  double temperature = 1.0;   // >= kMinTemperature (models/generation_settings.h)
  double top_p = 1.0;         // (0, 1]; 1 = off
  int64_t top_k = 0;          // 0 or -1 = off
  int64_t eos_token_id = -1;  // a sequence stops after emitting it; < 0: never stops early
  // More ids that stop a sequence as eos does (models with several end tokens: config.json's eos_token_id list).
  std::vector<int64_t> stop_token_ids;
  int64_t pad_token_id = 0;   // written after a sequence stopped
  uint64_t seed = 0;          // the sampling generator's seed (callers add their rank)
};

struct GenerationResult {
  // [B, P + N] int64: the left-padded prompts (pad_token_id at their padding), then the responses (pad after stop)
  torch::Tensor sequences;
  torch::Tensor attention_mask;  // [B, P + N] int64: 1 on real prompt tokens and on generated tokens up to the stop
  torch::Tensor response_mask;   // [B, N] int64: 1 on generated tokens up to and including eos
  torch::Tensor response_lengths;  // [B] int64
};

// Decodes from `prompt_ids` [B, P] (left-padded; `prompt_mask` 1 on real tokens) with the model's head
// (language_model only), under no-grad, in the model's parameter dtype on its device. N = max_new_tokens, fewer
// when every sequence stopped earlier. Deterministic for a given seed (and batch). The model must hold its full
// parameters (no hooks run): a sharded engine gathers them into a CausalLM first. Bad params or prompts (right
// padding, a row without a real token, ids outside the vocabulary, a value model): EngineryError.
GenerationResult generate(CausalLM& model, const torch::Tensor& prompt_ids, const torch::Tensor& prompt_mask,
                          const SamplingParams& params);

}  // namespace models
}  // namespace enginery
