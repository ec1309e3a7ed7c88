#pragma once
// How one GRPO trainer step divides into optimizer steps and which sampling seed each rank uses: kept apart from
// the step itself so the schedule and the tests need no model.
#include <cstdint>

#include "config/train_config.h"

namespace enginery {
namespace grpo {

// Optimizer steps per trainer step: ppo_epochs x mini-batches under grpo, 1 for the offline objectives. The LR
// schedule counts these (every train_batch steps it once).
int64_t optimizer_steps_per_step(const TrainConfig& config);

// Rows of one mini-batch on one rank: its share of ppo_mini_batch_size prompts, rollout.n responses each.
int64_t mini_batch_rows_per_rank(const TrainConfig& config, int64_t world_size);

// The sampling seed of one rank at one step: distinct across ranks and steps and fixed by data.seed, so a run is
// reproducible from its seed (at a given world size: which rank samples a prompt decides its responses).
uint64_t rollout_seed(int64_t data_seed, int64_t rank, int64_t step);

}  // namespace grpo
}  // namespace enginery
