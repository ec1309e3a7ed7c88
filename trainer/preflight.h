#pragma once
// Checks made once, before any rank starts, that need more than the config file itself: the data opens, the batch
// divides over the ranks, and the data's token ids fit the model's vocabulary.
#include <cstdint>

#include "trainer/train_config.h"

namespace enginery {

void preflight_data(const TrainConfig& config, int64_t world_size);

}  // namespace enginery
