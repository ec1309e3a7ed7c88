#include "trainer/preflight.h"

#include <algorithm>

#include "host_api/error.h"
#include "trainer/grpo/rollout_settings.h"
#include "trainer/loop/losses.h"

namespace enginery {

JsonlOptions jsonl_options(const TrainConfig& c, const std::string& split) {
  JsonlOptions options;
  options.loss_inputs = required_inputs(c.loss);
  options.require_loss_inputs = split == "train";
  options.loss_name = "loss.type = " + c.loss.type;
  for (const std::string& type : kLossTypes) {
    LossSection other;
    other.type = type;
    for (const std::string& name : required_inputs(other)) {
      const auto& mine = options.loss_inputs;
      if (std::find(mine.begin(), mine.end(), name) == mine.end()) {
        options.other_loss_inputs[name] = "loss.type = " + type;
      }
    }
  }
  options.truncation = c.data.truncation;
  options.unknown_fields = c.data.unknown_fields;
  return options;
}

void refuse_sequence_parallel(const TrainConfig& c) {
  const std::string name = "ulysses_sequence_parallel_size";
  const int64_t size = backend_option<int64_t>(c.engine, name, 1);
  if (size == 1) return;
  const std::string key = "engine." + c.engine.strategy + "." + name;
  throw EngineryError(key + " = " + std::to_string(size) + " needs the ranks of a sequence group to train on the same rows; " +
                          "enginery train gives every rank rows of its own (run it under verl through enginery.verl)",
                      c.where(key), "1, or leave it out");
}

void preflight_data(const TrainConfig& c, int64_t world_size, const std::string& device) {
  refuse_sequence_parallel(c);
  if (c.data.train_batch_size % world_size != 0) {
    throw EngineryError("data.train_batch_size = " + std::to_string(c.data.train_batch_size) +
                            " does not divide over " + std::to_string(world_size) + " ranks",
                        c.where("data.train_batch_size"), "a multiple of the number of ranks");
  }
  // GRPO's groups never straddle ranks: each rank samples all rollout.n responses of its own prompts.
  if (c.is_grpo() && c.actor.ppo_mini_batch_size % world_size != 0) {
    throw EngineryError("actor.ppo_mini_batch_size = " + std::to_string(c.actor.ppo_mini_batch_size) +
                            " prompts do not divide over " + std::to_string(world_size) + " ranks",
                        c.where("actor.ppo_mini_batch_size"), "a multiple of the number of ranks");
  }
  const TokenLimits limits = model_token_limits(c);
  auto train = open_dataset(c.data.train_files, "train", c.data.max_length, c.data.digits, c.data.train_size,
                            static_cast<uint64_t>(c.data.seed), limits, jsonl_options(c, "train"));
  if (train->size() < c.data.train_batch_size) {
    throw EngineryError(train->describe() + " holds fewer examples than one batch", c.where("data.train_batch_size"));
  }
  if (!c.data.val_files.empty()) {
    open_dataset(c.data.val_files, "val", c.data.max_length, c.data.digits, c.data.val_size,
                 static_cast<uint64_t>(c.data.seed), limits, jsonl_options(c, "val"));
  }
  if (c.is_grpo()) {
    check_rollout_settings(c, *train, limits, device == "cuda" ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU));
  }
}

}  // namespace enginery
