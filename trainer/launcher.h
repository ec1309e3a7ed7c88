#pragma once
// Rank launch (DESIGN §2 step 2). One path for all: either this process is one rank of a job whose environment
// was set by torchrun --no-python, srun or our own local launcher, or it is the local launcher that spawns N
// copies of an executable with that environment.
#include <cstdint>
#include <iosfwd>
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

struct LaunchResult {
  int exit_code = 0;     // 0, or the failed rank's exit status (128 + signal when it was killed)
  int failed_rank = -1;  // first rank seen failing
  std::string message;   // "rank 1 exited with status 3: <its last error line>"
};

struct LaunchOptions {
  int nproc = 1;
  std::string executable;          // absolute path; usually /proc/self/exe resolved
  std::vector<std::string> args;   // argv[1..]
  double grace_seconds = 5.0;      // SIGTERM to the others, then SIGKILL after this long
  int threads_per_rank = 0;        // OMP_NUM_THREADS for each rank unless already set; 0: cores / nproc
};

// Spawns the ranks (fork + exec, with PR_SET_PDEATHSIG so none outlives the launcher), forwards their stdout and
// stderr line by line prefixed with "[rank k] ", and waits. When a rank exits non-zero the others get SIGTERM, then
// SIGKILL after grace_seconds; the result names that rank and its last stderr line. Never hangs on a dead rank.
LaunchResult launch_local(const LaunchOptions& options, std::ostream& out, std::ostream& err);

// A TCP port that was free a moment ago on 127.0.0.1.
int free_tcp_port();

// Path of the running executable.
std::string self_executable();

}  // namespace enginery
