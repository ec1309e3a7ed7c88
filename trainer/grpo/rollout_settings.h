#pragma once
// GRPO's rollout.* keys as the sampler's settings, and their check against the model and device: the same
// function `enginery generate` checks its flags with (models/generation_settings.h), given the keys' names and
// where they were set, so both refuse the same values with the same reasons.
#include <c10/core/Device.h>

#include "models/generation.h"
#include "models/generation_settings.h"
#include "trainer/data/dataset.h"
#include "trainer/train_config.h"

namespace enginery {

// max_new_tokens, temperature, top_p, top_k of rollout.*; the caller adds the stop and pad ids and the seed.
models::SamplingParams rollout_sampling_params(const TrainConfig& config);

// Each setting named by its key and where it was set ("rollout.temperature", "grpo.toml:12:15").
models::GenerationSettingNames rollout_setting_names(const TrainConfig& config);

// Before any rank starts (and again on each rank, before the rollout copy is allocated): the prompts of `train`
// plus rollout.response_length within the model's max_position_embeddings, and rollout.dtype on `device`.
void check_rollout_settings(const TrainConfig& config, const Dataset& train, const TokenLimits& limits,
                            const c10::Device& device);

}  // namespace enginery
