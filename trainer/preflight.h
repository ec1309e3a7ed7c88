#pragma once
// Checks made once, before any rank starts, that need more than the config file itself: the data opens, the batch
// divides over the ranks, and the data's token ids and lengths fit the model.
#include <cstdint>

#include "trainer/dataset.h"
#include "trainer/train_config.h"

namespace enginery {

void preflight_data(const TrainConfig& config, int64_t world_size);

// The model's vocabulary size and max_position_embeddings (its config.json, or the built-in's), which every
// dataset is checked against when opened.
TokenLimits model_token_limits(const TrainConfig& config);

}  // namespace enginery
