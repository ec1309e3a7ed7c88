#include "trainer/grpo/step_plan.h"

#include "trainer/data/addition_task.h"

namespace enginery {
namespace grpo {

int64_t optimizer_steps_per_step(const TrainConfig& c) {
  if (!c.is_grpo()) return 1;
  return c.actor.ppo_epochs * (c.data.train_batch_size / c.actor.ppo_mini_batch_size);
}

int64_t mini_batch_rows_per_rank(const TrainConfig& c, int64_t world_size) {
  return c.actor.ppo_mini_batch_size / world_size * c.rollout.n;
}

uint64_t rollout_seed(int64_t data_seed, int64_t rank, int64_t step) {
  return mix64(mix64(mix64(static_cast<uint64_t>(data_seed)) + static_cast<uint64_t>(step)) +
               static_cast<uint64_t>(rank));
}

}  // namespace grpo
}  // namespace enginery
