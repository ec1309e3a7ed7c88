#pragma once
// The local launcher (docs/ARCHITECTURE.md, "Launching ranks"): `enginery train --nproc N` spawns N copies of an
// executable on this host with the torchrun-style environment (rank_env.h), so a rank cannot tell our launcher from
// torchrun --no-python or srun, and forwards their output.
#include <iosfwd>
#include <string>
#include <vector>

#include "launch/rank_env.h"

namespace enginery {

struct LaunchResult {
  int exit_code = 0;     // 0, or the failed rank's exit status (128 + signal when it was killed)
  int failed_rank = -1;  // first rank seen failing
  std::string message;   // "rank 1 exited with status 3: <its last error line>"
};

struct LaunchOptions {
  int nproc = 1;
  std::string executable;          // absolute path; usually self_executable() (spawn.h)
  std::vector<std::string> args;   // argv[1..]
  double grace_seconds = 5.0;      // SIGTERM to the others, then SIGKILL after this long
  int threads_per_rank = 0;        // OMP_NUM_THREADS for each rank unless already set; 0: cores / nproc
};

// Serves the job's rendezvous store on 127.0.0.1 (rank 0 connects to it like the others; rendezvous.h), spawns the
// ranks (spawn_ranks: fork + exec, none outlives the launcher) with MASTER_ADDR and MASTER_PORT naming it,
// forwards their stdout and stderr line by line prefixed with "[rank k] ", and waits. When a rank exits non-zero
// the others get SIGTERM, then SIGKILL after grace_seconds; the result names that rank and its last stderr line.
// Never hangs on a dead rank.
LaunchResult launch_local(const LaunchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace enginery
