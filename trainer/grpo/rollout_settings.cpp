#include "trainer/grpo/rollout_settings.h"

#include "models/model_args.h"
#include "trainer/grpo/rollout_data.h"

namespace enginery {

void check_rollout_settings(const TrainConfig& c, const Dataset& train, const TokenLimits& limits,
                            const c10::Device& device) {
  models::GenerationTarget target;
  target.model_type = models::args_of(c.model.source()).model_type;
  // Every prompt of the built-in task (the one GRPO reads, config/reader.cpp) has the same length.
  target.longest_prompt = static_cast<int64_t>(grpo::prompt_of(train.get(0), c.data.train_files).ids.size());
  target.prompt_where = train.describe();
  target.max_positions = limits.max_positions;
  target.model = limits.model;
  target.dtype = c.rollout.dtype;
  target.device = device;
  models::check_generation_settings(rollout_sampling_params(c), target, rollout_setting_names(c));
}

}  // namespace enginery
