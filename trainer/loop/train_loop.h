#pragma once
// One rank of `enginery train` (docs/ARCHITECTURE.md, "Launching ranks" and "One step"): rendezvous, engine, data,
// the loop with progress, metrics, evaluation and checkpoints, and the summary.
#include <string>
#include <vector>

#include "launch/rank_env.h"
#include "registry/plugin_loader.h"
#include "config/train_config.h"

namespace enginery {

// Runs the whole job as rank `env.rank`. With print_config, rank 0 prints the resolved config and writes it to
// the output directory (the local launcher has done both already). Returns the exit status.
int run_rank(const TrainConfig& config, const RankEnv& env, const std::vector<PluginSearchDir>& plugin_path,
             bool print_config);

// Writes <output_dir>/config.toml (the resolved config).
void save_resolved_config(const TrainConfig& config);

}  // namespace enginery
