#pragma once
// Starting N local rank processes and waiting for all of them: the one place enginery spawns ranks
// (docs/ARCHITECTURE.md, "Launching ranks"). The local launcher (local_launch.h), the multi-rank test harness
// (tests/support/multirank.h) and the conformance suite's multi-rank check are its callers.
//
// Each rank is fork + exec of argv with PR_SET_PDEATHSIG, so no rank outlives the process that spawned it (call
// spawn_ranks from a thread that lives until it returns: it does, since it waits). Between fork and exec the child
// makes only async-signal-safe calls, which is what makes fork safe in a process with threads (LibTorch's pools).
// spawn_ranks never hangs on a dead or stuck rank when a timeout or stop_on_failure is set.
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace enginery {

struct SpawnOptions {
  int nproc = 1;
  std::vector<std::string> argv;  // argv[0]: the executable's path (no PATH search); the same for every rank
  // Rank r's own variables ("NAME=value"). A rank inherits this process's environment minus the variables that
  // rank_env names and minus `unset` (a name ending in '*' drops every variable with that prefix).
  std::function<std::vector<std::string>(int rank)> rank_env;
  std::vector<std::string> unset;
  // Output. With log_files (one per rank) a rank's stdout and stderr both go to its file and its stdin is
  // /dev/null. Without, they are forwarded line by line to `out` and `err` with the prefix "[rank r] " (null:
  // discarded; the last line is still kept for RankExit::last_line).
  std::vector<std::string> log_files;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // After timeout_s (0: never) every rank still running is killed with SIGKILL.
  double timeout_s = 0;
  // With stop_on_failure, the first rank that fails gets the others SIGTERM, then SIGKILL after grace_s: a rank
  // blocked in a collective with a dead peer would otherwise wait forever.
  bool stop_on_failure = false;
  double grace_s = 5.0;
};

struct RankExit {
  int rank = 0;
  int exit_code = -1;      // its exit status; -1 when a signal ended it
  int signal = 0;          // the signal that ended it, 0 when it exited
  bool timed_out = false;  // killed because the ranks outlived timeout_s
  double seconds = 0;      // from the start of the spawn to its end
  std::string last_line;   // forwarded output only: its last non-blank stderr line, else its last stdout line

  bool ok() const { return exit_code == 0; }
  // The exit status a shell would report: the exit code, or 128 + signal.
  int status() const;
  // "exited with status 3", "was killed by signal 9 (Killed)", "timed out after 120.0 s (killed)"
  std::string describe() const;
};

struct SpawnResult {
  std::vector<RankExit> ranks;  // indexed by rank
  int first_failed = -1;        // the first rank seen failing; -1 when every rank exited 0
};

// Starts options.nproc copies of options.argv and waits until every one has ended. Throws EngineryError when a
// rank cannot be started (after killing those already started); a rank whose exec fails exits with 127.
SpawnResult spawn_ranks(const SpawnOptions& options);

// Path of the running executable (/proc/self/exe resolved): what a program spawns to run copies of itself.
std::string self_executable();

// The last max_bytes of a file (a rank's log), "..." first when it was cut; "" when it cannot be read.
std::string read_log(const std::string& path, size_t max_bytes = std::string::npos);

}  // namespace enginery
