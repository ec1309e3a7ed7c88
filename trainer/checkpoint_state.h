#pragma once
// The trainer's side of a checkpoint. <out>/global_step_<N>/ holds the engine's shards and, written by rank 0 only
// after every rank's engine save returned, trainer_state.json (global step, data position, seed). A checkpoint is
// complete exactly when trainer_state.json exists; <out>/latest_checkpointed_iteration.txt (verl's name) names
// the newest complete one and is replaced atomically.
#include <cstdint>
#include <optional>
#include <string>

namespace enginery {

struct TrainerState {
  int64_t global_step = 0;   // optimizer steps done
  int64_t epoch = 0;         // data position: the epoch of the next step
  int64_t step_in_epoch = 0; // and its index within that epoch
  int64_t data_seed = 0;
  int64_t train_batch_size = 0;
};

std::string checkpoint_dir(const std::string& output_dir, int64_t global_step);

// Rank 0, after the engine's save: trainer_state.json, then the latest marker.
void write_trainer_state(const std::string& output_dir, const TrainerState& state);

// The newest complete checkpoint: the marker's when it is complete, else the highest complete global_step_<N>.
std::optional<TrainerState> find_latest_checkpoint(const std::string& output_dir);

}  // namespace enginery
