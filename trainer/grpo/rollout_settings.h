#pragma once
// GRPO's rollout settings (config/rollout_sampling.h) checked against the model, the prompts and the device: the same
// function `enginery generate` checks its flags with (models/generation_settings.h), given the keys' names and
// where they were set, so both refuse the same values with the same reasons.
#include <c10/core/Device.h>

#include "config/rollout_sampling.h"
#include "config/train_config.h"
#include "trainer/data/dataset.h"

namespace enginery {

// Before any rank starts (and again on each rank, before the rollout copy is allocated): the prompts of `train`
// plus rollout.response_length within the model's max_position_embeddings, and rollout.dtype on `device`.
void check_rollout_settings(const TrainConfig& config, const Dataset& train, const TokenLimits& limits,
                            const c10::Device& device);

}  // namespace enginery
