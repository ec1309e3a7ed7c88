#pragma once
// Checks made once, before any rank starts, that need more than the config file itself: the data opens, the batch
// divides over the ranks, and the data's token ids and lengths fit the model.
#include <cstdint>

#include "trainer/data/dataset.h"
#include "config/train_config.h"

namespace enginery {

// `device`: where the ranks will run ("cpu", "cuda"), for GRPO's rollout.dtype.
void preflight_data(const TrainConfig& config, int64_t world_size, const std::string& device);

// Refuses [engine.<backend>] ulysses_sequence_parallel_size other than 1: this trainer gives every rank rows of its
// own, where Ulysses needs the ranks of a sequence group to share theirs (verl's workers do; enginery.verl).
void refuse_sequence_parallel(const TrainConfig& config);

// How .jsonl rows of `split` ("train", "val") are read under the config: the loss's per-token inputs (required in
// training rows), the other losses' (refused with the reason), data.truncation and data.unknown_fields.
JsonlOptions jsonl_options(const TrainConfig& config, const std::string& split);

}  // namespace enginery
