#include "launch/local_launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "host_api/error.h"
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

}  // namespace

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw EngineryError(std::string("socket: ") + std::strerror(errno), "launcher");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw EngineryError(std::string("cannot find a free port: ") + std::strerror(errno), "launcher");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

LaunchResult launch_local(const LaunchOptions& options, std::ostream& out, std::ostream& err) {
  if (options.nproc < 1) throw EngineryError("--nproc must be at least 1", "--nproc");
  SpawnOptions spawn;
  spawn.nproc = options.nproc;
  spawn.argv = {options.executable};
  spawn.argv.insert(spawn.argv.end(), options.args.begin(), options.args.end());
  spawn.rank_env = [nproc = options.nproc, port = free_tcp_port(), threads = threads_per_rank(options)](int rank) {
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
