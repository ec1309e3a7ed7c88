#include "launch/rank_env.h"

#include <cstdlib>

#include "host_api/error.h"

namespace enginery {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t env_int(const char* name, int64_t fallback) {
  auto value = env(name);
  if (!value) return fallback;
  try {
    size_t used = 0;
    const int64_t parsed = std::stoll(*value, &used);
    if (used == value->size()) return parsed;
  } catch (const std::exception&) {
  }
  throw EngineryError(std::string("not an integer: '") + *value + "'", std::string("environment ") + name);
}

// MASTER_ADDR, else the first host of a plain SLURM_STEP_NODELIST, else the default.
std::string master_addr(const std::string& fallback) {
  if (auto addr = env("MASTER_ADDR")) return *addr;
  auto nodes = env("SLURM_STEP_NODELIST");
  if (!nodes) return fallback;
  // A plain host list "node1,node2" works; a compressed one ("node[1-4]") needs MASTER_ADDR set by the job.
  if (nodes->find('[') != std::string::npos) {
    throw EngineryError("MASTER_ADDR is not set and SLURM_STEP_NODELIST is compressed (" + *nodes + ")",
                        "environment", "export MASTER_ADDR=$(scontrol show hostnames | head -n1)");
  }
  return nodes->substr(0, nodes->find(','));
}

}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  RankEnv e;
  if (env("RANK")) {
    e.rank = env_int("RANK", 0);
    e.world_size = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size);
  } else if (env("SLURM_PROCID")) {
    e.rank = env_int("SLURM_PROCID", 0);
    e.world_size = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.local_world_size = env_int("SLURM_NTASKS_PER_NODE", e.world_size);
  } else {
    return std::nullopt;
  }
  e.master_addr = master_addr(e.master_addr);
  const int64_t port = env_int("MASTER_PORT", 29500);
  // A TCP port is 16 bits: a larger value would silently wrap to another port.
  if (port < 1 || port > 65535) {
    throw EngineryError("MASTER_PORT " + std::to_string(port) + " is not a TCP port", "environment", "1..65535");
  }
  e.master_port = static_cast<int>(port);
  e.spawned_locally = env("ENGINERY_LOCAL_LAUNCH").has_value();
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size) {
    throw EngineryError("RANK " + std::to_string(e.rank) + " is outside WORLD_SIZE " + std::to_string(e.world_size),
                        "environment");
  }
  return e;
}

std::vector<std::string> rank_env_variables(const RankEnv& env) {
  std::vector<std::string> variables = {
      "RANK=" + std::to_string(env.rank),
      "WORLD_SIZE=" + std::to_string(env.world_size),
      "LOCAL_RANK=" + std::to_string(env.local_rank),
      "LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size),
      "MASTER_ADDR=" + env.master_addr,
      "MASTER_PORT=" + std::to_string(env.master_port)};
  if (env.spawned_locally) variables.push_back("ENGINERY_LOCAL_LAUNCH=1");
  return variables;
}

}  // namespace enginery
