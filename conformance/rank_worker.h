#pragma once
// The multi-rank check: real rank processes (this same program with "--rank-worker <spec>", started by
// launch/spawn.h with RANK and WORLD_SIZE in the environment) over a FileStore, compared against a world-size-1 run
// in the parent.
#include <string>
#include <vector>

#include "conformance/data.h"
#include "conformance/target.h"
#include "launch/spawn.h"

namespace enginery {
namespace conformance {

constexpr const char* kRankWorkerFlag = "--rank-worker";
constexpr int kParitySteps = 3;

// The training both sides run: kParitySteps fp32 train_batch steps on this rank's contiguous share of one fixed
// batch. Returns the parameters after the last step, followed by "grad_norm.<step>" entries.
ParamList parity_run(BaseEngine& engine, const Target& target, int64_t rank, int64_t world_size);

// Entry of a rank worker process; returns its exit status. Errors go to stderr.
int run_rank_worker(const std::string& spec_file);

// Starts `world_size` copies of `argv` as rank workers, each logging to "<log_prefix>.rank<r>.log", waits up to
// `timeout_s` (then kills them all) and returns each rank's exit.
SpawnResult spawn_rank_workers(const std::vector<std::string>& argv, int world_size, double timeout_s,
                               const std::string& log_prefix);

}  // namespace conformance
}  // namespace enginery
