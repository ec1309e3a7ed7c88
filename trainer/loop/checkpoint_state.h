#pragma once
// The trainer's side of a checkpoint (verl's layout):
//   <out>/global_step_<N>/actor/               the engine's checkpoint (any engine format; FSDP: CHECKPOINT.md)
//   <out>/global_step_<N>/trainer_state.json   global step, data position, seed, batch size
//   <out>/latest_checkpointed_iteration.txt    verl's marker, informative
// The whole global_step_<N> is built under <out>/.global_step_<N>.tmp and renamed into place by rank 0 only after
// every rank's engine save returned and trainer_state.json is on disk, so a directory with that name is always
// complete and resumable: a kill at any moment leaves the previous one as the newest. Retention runs after the
// rename and counts complete directories on disk, so it never removes the last resumable one; what a kill leaves of
// a retention or replacement is finished by the next save and by --resume. A global_step_<N>
// whose trainer_state.json is missing, unreadable or inconsistent is never deleted and never silently skipped:
// resuming past it is refused by name, since the resumed run would overwrite it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace enginery {

struct TrainerState {
  int64_t global_step = 0;   // optimizer steps done
  int64_t epoch = 0;         // data position: the epoch of the next step
  int64_t step_in_epoch = 0; // and its index within that epoch
  int64_t data_seed = 0;
  int64_t train_batch_size = 0;
};

std::string checkpoint_dir(const std::string& output_dir, int64_t global_step);
// Where the engine's checkpoint lives inside a checkpoint directory (published or temporary).
std::string engine_checkpoint_dir(const std::string& checkpoint_dir);
// The temporary directory a save of `global_step` builds in.
std::string temp_checkpoint_dir(const std::string& output_dir, int64_t global_step);

// Rank 0, before any rank saves: finishes what a killed retention or replacement left (durable_fs.h), refuses to
// replace this step's checkpoint when it holds files a save did not write (naming them), removes a killed save's
// leftover and creates temp_checkpoint_dir empty.
void begin_checkpoint(const std::string& output_dir, int64_t global_step);

// At the start of a resumed run, before its checkpoints are read (no save can be running): finishes what a kill
// left of a retention or a replacement (a set-aside checkpoint put back, half-removed ones removed) and removes
// killed saves' temporary directories. One line per thing done, for a note.
std::vector<std::string> finish_interrupted_saves(const std::string& output_dir);
// A global_step_<N> directory that cannot be resumed, and why ("trainer_state.json: ...").
struct UnusableCheckpoint {
  int64_t global_step = 0;  // the N of its name
  std::string dir;
  std::string reason;
};

// Rank 0, after every rank's engine save returned: trainer_state.json into the temporary directory, fsync, rename
// to checkpoint_dir, the latest marker, then retention (max_ckpt_to_keep > 0: keep that many resumable ones; those
// it cannot read are kept and returned, for a warning).
std::vector<UnusableCheckpoint> commit_checkpoint(const std::string& output_dir, const TrainerState& state,
                                                  int64_t max_ckpt_to_keep);

// trainer_state.json into an existing checkpoint_dir(output_dir, state.global_step), then the latest marker.
void write_trainer_state(const std::string& output_dir, const TrainerState& state);

// Every global_step_<N> in output_dir: the resumable ones (oldest first) and the others with the reason.
struct CheckpointScan {
  std::vector<TrainerState> resumable;
  std::vector<UnusableCheckpoint> unusable;
};
CheckpointScan scan_checkpoints(const std::string& output_dir);

// The newest complete checkpoint: the highest global_step_<N> holding a readable trainer_state.json.
std::optional<TrainerState> find_latest_checkpoint(const std::string& output_dir);

// What --resume continues from: the newest resumable checkpoint, or nullopt when there is none at all. A
// global_step_<N> newer than it that cannot be resumed is an error naming it and why (continuing from an older one
// would overwrite it); older unusable ones are added to `older_unusable`, for a warning.
std::optional<TrainerState> checkpoint_to_resume(const std::string& output_dir,
                                                 std::vector<UnusableCheckpoint>& older_unusable);

}  // namespace enginery
