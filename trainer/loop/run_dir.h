#pragma once
// A run's output directory is never half-overwritten (docs/ARCHITECTURE.md, "Checkpoints"): one that already holds
// a run is continued with --resume, moved aside whole with --fresh-run, or refused. A run holds metrics.jsonl or
// checkpoints (global_step_<N>, a save in progress, the latest marker); config.toml alone is what a run that
// failed before its first step leaves, and is simply rewritten.
#include <string>
#include <vector>

#include "config/train_config.h"

namespace enginery {

// What in `dir` shows that a run used it ("metrics.jsonl", "global_step_20", ...); empty when unused or absent.
std::vector<std::string> run_dir_contents(const std::string& dir);

struct PreparedOutputDir {
  std::string moved_to;               // where an old run was moved ("" when nothing was moved)
  std::vector<std::string> finished;  // what a killed save, replacement or retention left and was finished
};

// The launcher (or rank 0 of an externally launched job), before anything is written to config.output_dir():
//  - trainer.resume_mode auto: what killed saves left is finished first (finish_interrupted_saves); then a used
//    directory must hold a checkpoint to continue from (checkpoint_to_resume's error names one that cannot be
//    resumed); fresh_run is a contradiction.
//  - otherwise a used directory is refused, naming it and what it holds; with fresh_run it is renamed whole to
//    <dir>.old-<UTC time> and an empty one created.
// Throws EngineryError.
PreparedOutputDir prepare_output_dir(const TrainConfig& config, bool fresh_run);

}  // namespace enginery
