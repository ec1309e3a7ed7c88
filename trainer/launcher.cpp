#include "trainer/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <thread>

#include "host_api/error.h"

extern char** environ;

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

struct Child {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  std::string out_partial;
  std::string err_partial;
  std::string last_err_line;
  std::string last_out_line;
  bool exited = false;
  int status = 0;
};

void emit_lines(std::string& partial, const char* data, size_t n, const std::string& prefix, std::ostream& stream,
                std::string& last_line, bool flush_all) {
  partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = partial.substr(start, nl - start);
    stream << prefix << line << '\n';
    if (line.find_first_not_of(" \t\r") != std::string::npos) last_line = line;
  }
  partial.erase(0, start);
  if (flush_all && !partial.empty()) {
    stream << prefix << partial << '\n';
    last_line = partial;
    partial.clear();
  }
  stream.flush();
}

// Reads what is available on fd; closes it at EOF.
void drain(int& fd, std::string& partial, const std::string& prefix, std::ostream& stream, std::string& last_line) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      emit_lines(partial, buffer, static_cast<size_t>(n), prefix, stream, last_line, false);
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    emit_lines(partial, buffer, 0, prefix, stream, last_line, true);  // EOF or error: the rank is gone
    ::close(fd);
    fd = -1;
    return;
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
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
  if (auto addr = env("MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (auto nodes = env("SLURM_STEP_NODELIST")) {
    // A plain host list "node1,node2" works; a compressed one ("node[1-4]") needs MASTER_ADDR set by the job.
    if (nodes->find('[') != std::string::npos) {
      throw EngineryError("MASTER_ADDR is not set and SLURM_STEP_NODELIST is compressed (" + *nodes + ")",
                          "environment", "export MASTER_ADDR=$(scontrol show hostnames | head -n1)");
    }
    e.master_addr = nodes->substr(0, nodes->find(','));
  }
  e.master_port = static_cast<int>(env_int("MASTER_PORT", 29500));
  e.spawned_locally = env("ENGINERY_LOCAL_LAUNCH").has_value();
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size) {
    throw EngineryError("RANK " + std::to_string(e.rank) + " is outside WORLD_SIZE " + std::to_string(e.world_size),
                        "environment");
  }
  return e;
}

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

std::string self_executable() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) throw EngineryError("cannot resolve /proc/self/exe", "launcher");
  return std::string(buffer, static_cast<size_t>(n));
}

LaunchResult launch_local(const LaunchOptions& options, std::ostream& out, std::ostream& err) {
  const int nproc = options.nproc;
  if (nproc < 1) throw EngineryError("--nproc must be at least 1", "--nproc");
  const int port = free_tcp_port();
  int threads = options.threads_per_rank;
  if (threads <= 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / nproc);
  }

  // Everything the children need is built before fork: between fork and exec only async-signal-safe calls.
  std::vector<std::string> argv_store = {options.executable};
  argv_store.insert(argv_store.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<Child> children(nproc);
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      if (name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" || name == "LOCAL_WORLD_SIZE" ||
          name == "MASTER_ADDR" || name == "MASTER_PORT" || name == "ENGINERY_LOCAL_LAUNCH") {
        continue;
      }
      env_store.push_back(entry);
    }
    env_store.push_back("RANK=" + std::to_string(r));
    env_store.push_back("WORLD_SIZE=" + std::to_string(nproc));
    env_store.push_back("LOCAL_RANK=" + std::to_string(r));
    env_store.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    env_store.push_back("MASTER_ADDR=127.0.0.1");
    env_store.push_back("MASTER_PORT=" + std::to_string(port));
    env_store.push_back("ENGINERY_LOCAL_LAUNCH=1");
    if (std::getenv("OMP_NUM_THREADS") == nullptr) env_store.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw EngineryError(std::string("pipe: ") + std::strerror(errno), "launcher");
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw EngineryError(std::string("fork: ") + std::strerror(errno), "launcher");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::execve(options.executable.c_str(), argv.data(), envp.data());
      const char msg[] = "enginery launcher: execve failed\n";
      (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    children[r].pid = pid;
    children[r].out_fd = out_pipe[0];
    children[r].err_fd = err_pipe[0];
  }

  using Clock = std::chrono::steady_clock;
  LaunchResult result;
  std::optional<Clock::time_point> kill_deadline;
  bool killed = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> owners;  // (rank, is_stderr)
    for (int r = 0; r < nproc; ++r) {
      if (children[r].out_fd >= 0) fds.push_back({children[r].out_fd, POLLIN, 0}), owners.push_back({r, false});
      if (children[r].err_fd >= 0) fds.push_back({children[r].err_fd, POLLIN, 0}), owners.push_back({r, true});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = children[owners[i].first];
      const std::string prefix = "[rank " + std::to_string(owners[i].first) + "] ";
      if (owners[i].second) {
        drain(c.err_fd, c.err_partial, prefix, err, c.last_err_line);
      } else {
        drain(c.out_fd, c.out_partial, prefix, out, c.last_out_line);
      }
    }

    bool all_exited = true;
    for (int r = 0; r < nproc; ++r) {
      Child& c = children[r];
      if (c.exited) continue;
      int status = 0;
      const pid_t got = ::waitpid(c.pid, &status, WNOHANG);
      if (got == c.pid) {
        c.exited = true;
        c.status = status;
        if (failed(status) && result.failed_rank < 0) {
          result.failed_rank = r;
          kill_deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options.grace_seconds * 1000));
          for (int o = 0; o < nproc; ++o) {
            if (!children[o].exited) ::kill(children[o].pid, SIGTERM);
          }
        }
      } else {
        all_exited = false;
      }
    }
    if (all_exited) break;
    if (kill_deadline && !killed && Clock::now() >= *kill_deadline) {
      for (auto& c : children) {
        if (!c.exited) ::kill(c.pid, SIGKILL);
      }
      killed = true;
    }
  }
  // The ranks are gone; read what they left in the pipes (nothing else holds the write ends).
  for (int r = 0; r < nproc; ++r) {
    Child& c = children[r];
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    ::fcntl(c.out_fd, F_SETFL, 0);
    ::fcntl(c.err_fd, F_SETFL, 0);
    while (c.out_fd >= 0) drain(c.out_fd, c.out_partial, prefix, out, c.last_out_line);
    while (c.err_fd >= 0) drain(c.err_fd, c.err_partial, prefix, err, c.last_err_line);
  }
  if (result.failed_rank >= 0) {
    const Child& c = children[result.failed_rank];
    result.exit_code = exit_code_of(c.status);
    const std::string& last = !c.last_err_line.empty() ? c.last_err_line : c.last_out_line;
    result.message = "rank " + std::to_string(result.failed_rank) + " " + describe_status(c.status) +
                     (last.empty() ? "" : ": " + last);
  }
  return result;
}

}  // namespace enginery
