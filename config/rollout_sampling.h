#pragma once
// GRPO's rollout.* keys as the sampler's settings, and the keys' names for messages: what the config reader checks
// the values with (models/generation_settings.h) and the GRPO step samples with.
#include "config/train_config.h"
#include "models/generation.h"
#include "models/generation_settings.h"

namespace enginery {

// max_new_tokens, temperature, top_p, top_k of rollout.*; the caller adds the stop and pad ids and the seed.
models::SamplingParams rollout_sampling_params(const TrainConfig& config);

// Each setting named by its key and where it was set ("rollout.temperature", "grpo.toml:12:15").
models::GenerationSettingNames rollout_setting_names(const TrainConfig& config);

}  // namespace enginery
