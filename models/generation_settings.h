#pragma once
// The one check of what a generation will run with (docs/ARCHITECTURE.md, "Layers": models), made before any
// model is built or rank started by every caller: `enginery generate` (its flags), GRPO's rollout (rollout.* keys,
// when the config is read and again before launch) and generate() itself. Each caller passes its own names for
// the settings, so the message names the flag or key the user wrote and where.
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "models/generation.h"

namespace enginery {
namespace models {

// Below this temperature logits / temperature overflows float32 for ordinary logits and softmax yields NaN; any
// such distribution is already the argmax (use greedy decoding instead).
constexpr double kMinTemperature = 0.01;

// One setting as the caller names it: the key or flag in the message, and where its value was set.
struct SettingName {
  std::string key;    // "rollout.temperature", "--temperature"
  std::string where;  // "grpo.toml:12:15", "--temperature"
};

struct GenerationSettingNames {
  SettingName temperature, top_p, top_k, max_new_tokens, dtype;
};

// What the settings are checked against: the longest prompt, the model's positions, and where the sampler runs.
struct GenerationTarget {
  int64_t longest_prompt = 0;   // tokens; 0: prompts not known yet (length check skipped)
  std::string prompt_where;     // for messages: "prompts.json: [3]", "data.digits = 2 (builtin:addition)"
  int64_t max_positions = 0;    // max_position_embeddings; 0: unchecked
  std::string model;            // "model.path = ...", for messages
  std::string model_type = "qwen2";     // the model's architecture (llama, qwen2, qwen3), for the dtype probe
  c10::ScalarType dtype = c10::kFloat;  // the sampler's parameters
  c10::Device device = c10::Device(c10::kCPU);
};

// Sampling values that cannot produce a distribution, refused by name: temperature not finite or below
// kMinTemperature, top_p outside (0, 1], top_k below -1 (-1 and 0 are "off", verl's and transformers'
// spellings), max_new_tokens below 1. With params.greedy the sampling values are not read.
void check_sampling_values(const SamplingParams& params, const GenerationSettingNames& names);

// check_sampling_values, then what the model and device must allow: longest_prompt + max_new_tokens within
// max_position_embeddings (a huge max_new_tokens is refused here, before the KV cache is allocated), and a dtype
// the device computes in.
void check_generation_settings(const SamplingParams& params, const GenerationTarget& target,
                               const GenerationSettingNames& names);

// Whether `device` can generate with a model of `model_type` in `dtype`: the built-in tiny model of that
// architecture (builtin:<model_type>-tiny, ~200K parameters) is built in `dtype` there and generates two tokens,
// the same kernels a real model runs per token, so a pair this LibTorch cannot run is refused by name before
// launch rather than failing deep inside a kernel after it. Throws EngineryError naming `name`.
void check_dtype_on_device(c10::ScalarType dtype, const c10::Device& device, const std::string& model_type,
                           const SettingName& name);

}  // namespace models
}  // namespace enginery
