#include "config/rollout_sampling.h"

namespace enginery {

models::SamplingParams rollout_sampling_params(const TrainConfig& c) {
  models::SamplingParams params;
  params.max_new_tokens = c.rollout.response_length;
  params.temperature = c.rollout.temperature;
  params.top_p = c.rollout.top_p;
  params.top_k = c.rollout.top_k;
  return params;
}

models::GenerationSettingNames rollout_setting_names(const TrainConfig& c) {
  auto name = [&](const std::string& key) { return models::SettingName{key, c.where(key)}; };
  return {name("rollout.temperature"), name("rollout.top_p"), name("rollout.top_k"), name("rollout.response_length"),
          name("rollout.dtype")};
}

}  // namespace enginery
