#pragma once
// What one rank knows about its job, read from the environment its launcher set (docs/ARCHITECTURE.md, "Launching
// ranks"): torchrun --no-python, srun, or our own spawner (spawn.h), which writes it with rank_env_variables.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace enginery {

struct RankEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool spawned_locally = false;  // started by launch_local (ENGINERY_LOCAL_LAUNCH=1)
};

// RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT (torchrun, our launcher), else SLURM_PROCID /
// SLURM_NTASKS / SLURM_LOCALID (srun; MASTER_ADDR defaults to the first host of SLURM_STEP_NODELIST when it is a
// plain host name, MASTER_PORT to 29500). Nothing set: nullopt. Inconsistent values throw EngineryError.
std::optional<RankEnv> rank_env_from_environment();

// The torchrun-style variables ("NAME=value") that make rank_env_from_environment() return `env` in a child:
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and ENGINERY_LOCAL_LAUNCH=1 when
// env.spawned_locally.
std::vector<std::string> rank_env_variables(const RankEnv& env);

}  // namespace enginery
