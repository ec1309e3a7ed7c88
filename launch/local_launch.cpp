#include "launch/local_launch.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "host_api/error.h"
#include "support/torch_errors.h"
#include "launch/spawn.h"

namespace enginery {
namespace {

int threads_per_rank(const LaunchOptions& options) {
  if (options.threads_per_rank > 0) return options.threads_per_rank;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / options.nproc);
}

// Rank r's variables: the torchrun set for one host, and the launcher's share of the cores unless the user chose.
std::vector<std::string> local_rank_variables(int rank, int nproc, int port, int threads) {
  RankEnv env;
  env.rank = rank;
  env.world_size = nproc;
  env.local_rank = rank;
  env.local_world_size = nproc;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.spawned_locally = true;
  std::vector<std::string> variables = rank_env_variables(env);
  if (std::getenv("OMP_NUM_THREADS") == nullptr) variables.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  return variables;
}

// The job's rendezvous store, served by the launcher for as long as the ranks run, on a port the kernel gives it
// (as torchrun's agent store). A port found free and left for rank 0 to bind later can be taken in between: by
// another job's launcher on a host running several (a sweep), which then failed with EADDRINUSE.
c10::intrusive_ptr<c10d::TCPStore> serve_rendezvous_store() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;  // the ranks' check-in waits, and names who is missing (rendezvous.h)
  try {
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  } catch (const std::exception& e) {
    throw EngineryError("cannot serve the rendezvous store on 127.0.0.1: " + compat::error_first_line(e), "launcher",
                        "a host where this process may listen on a loopback TCP port");
  }
}

}  // namespace

LaunchResult launch_local(const LaunchOptions& options, std::ostream& out, std::ostream& err) {
  if (options.nproc < 1) throw EngineryError("--nproc must be at least 1", "--nproc");
  const auto store = serve_rendezvous_store();
  SpawnOptions spawn;
  spawn.nproc = options.nproc;
  spawn.argv = {options.executable};
  spawn.argv.insert(spawn.argv.end(), options.args.begin(), options.args.end());
  spawn.rank_env = [nproc = options.nproc, port = store->getPort(), threads = threads_per_rank(options)](int rank) {
    return local_rank_variables(rank, nproc, port, threads);
  };
  spawn.out = &out;
  spawn.err = &err;
  spawn.stop_on_failure = true;
  spawn.grace_s = options.grace_seconds;
  const SpawnResult spawned = spawn_ranks(spawn);

  LaunchResult result;
  if (spawned.first_failed < 0) return result;
  const RankExit& failed = spawned.ranks[static_cast<size_t>(spawned.first_failed)];
  result.failed_rank = failed.rank;
  result.exit_code = failed.status();
  result.message = "rank " + std::to_string(failed.rank) + " " + failed.describe() +
                   (failed.last_line.empty() ? "" : ": " + failed.last_line);
  return result;
}

}  // namespace enginery
