#include "launch/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "host_api/error.h"
#include "launch/rank_output.h"

extern char** environ;

namespace enginery {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw EngineryError(what + ": " + std::strerror(errno), "launcher");
}

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// The child's ends of its stdio, closed in the parent once the child has them.
struct ChildStdio {
  Fd out;
  Fd err;       // empty: stderr goes where stdout goes
  int in = -1;  // borrowed; -1: inherited
};

std::string variable_name(const std::string& entry) { return entry.substr(0, entry.find('=')); }

bool matches(const std::string& name, const std::string& pattern) {
  if (pattern.empty() || pattern.back() != '*') return name == pattern;
  const size_t prefix = pattern.size() - 1;
  return name.compare(0, prefix, pattern, 0, prefix) == 0;
}

// This process's environment without what the rank sets itself or must not inherit, then the rank's variables.
std::vector<std::string> child_environment(const std::vector<std::string>& rank_variables,
                                           const std::vector<std::string>& unset) {
  std::vector<std::string> dropped = unset;
  for (const auto& variable : rank_variables) dropped.push_back(variable_name(variable));
  std::vector<std::string> result;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = variable_name(entry);
    bool keep = true;
    for (const auto& pattern : dropped) keep = keep && !matches(name, pattern);
    if (keep) result.push_back(entry);
  }
  result.insert(result.end(), rank_variables.begin(), rank_variables.end());
  return result;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (auto& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

// A pipe: returns its non-blocking read end; write_end receives the other.
int open_pipe(Fd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe");
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  write_end.reset(fds[1]);
  return fds[0];
}

// The forked child: async-signal-safe calls only, everything it uses was built before fork.
[[noreturn]] void exec_child(const ChildStdio& io, pid_t parent, char* const* argv, char* const* envp,
                             const std::string& exec_failed) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);  // the spawner died before prctl took effect
  sigset_t none;  // the forking thread's blocked signals must not become the rank's (SIGTERM must reach it)
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (io.in >= 0) ::dup2(io.in, STDIN_FILENO);
  ::dup2(io.out.get(), STDOUT_FILENO);
  ::dup2(io.err.get() >= 0 ? io.err.get() : io.out.get(), STDERR_FILENO);
  ::execve(argv[0], argv, envp);
  (void)!::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
  ::_exit(127);
}

// One rank as the parent sees it.
struct Child {
  pid_t pid = -1;
  bool running = false;
  int out_fd = -1;  // read ends of the forwarded pipes; -1 when closed or when the output goes to a log file
  int err_fd = -1;
  std::unique_ptr<PrefixedLines> out;
  std::unique_ptr<PrefixedLines> err;
  RankExit exit;
};

// Starts the ranks and watches them. Its destructor kills (SIGKILL) and reaps any rank still running, so a throw
// half-way leaves no orphan.
class Supervisor {
 public:
  explicit Supervisor(const SpawnOptions& options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  void start(int rank);
  SpawnResult wait();

 private:
  bool forwarding() const { return options_.log_files.empty(); }
  bool any_running() const;
  ChildStdio open_stdio(int rank, Child& child);
  bool pump_output(int timeout_ms);
  void reap();
  void stop_others_after_failure();
  void enforce_timeout();
  void signal_running(int sig);
  void finish_output();

  const SpawnOptions& options_;
  std::vector<std::string> argv_store_;
  std::vector<char*> argv_;
  std::string exec_failed_;
  Fd dev_null_;
  std::vector<Child> children_;
  Clock::time_point start_ = Clock::now();
  std::optional<Clock::time_point> kill_at_;  // when the ranks left after a failure get SIGKILL
  bool killed_ = false;
  bool timed_out_ = false;
  int first_failed_ = -1;
};

Supervisor::Supervisor(const SpawnOptions& options)
    : options_(options), argv_store_(options.argv), children_(static_cast<size_t>(options.nproc)) {
  argv_ = pointers(argv_store_);
  exec_failed_ = "enginery launcher: cannot execute " + options.argv[0] + "\n";
  if (!forwarding()) {
    dev_null_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (dev_null_.get() < 0) throw_errno("cannot open /dev/null");
  }
}

Supervisor::~Supervisor() {
  for (Child& c : children_) {
    if (c.running) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
    }
    if (c.out_fd >= 0) ::close(c.out_fd);
    if (c.err_fd >= 0) ::close(c.err_fd);
  }
}

ChildStdio Supervisor::open_stdio(int rank, Child& child) {
  ChildStdio io;
  if (!forwarding()) {
    const std::string& path = options_.log_files[static_cast<size_t>(rank)];
    io.out.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (io.out.get() < 0) throw_errno("cannot open " + path);
    io.in = dev_null_.get();
    return io;
  }
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  child.out = std::make_unique<PrefixedLines>(prefix, options_.out);
  child.err = std::make_unique<PrefixedLines>(prefix, options_.err);
  child.out_fd = open_pipe(io.out);
  child.err_fd = open_pipe(io.err);
  return io;
}

void Supervisor::start(int rank) {
  Child& child = children_[static_cast<size_t>(rank)];
  child.exit.rank = rank;
  std::vector<std::string> env_store =
      child_environment(options_.rank_env ? options_.rank_env(rank) : std::vector<std::string>{}, options_.unset);
  const std::vector<char*> envp = pointers(env_store);
  const ChildStdio io = open_stdio(rank, child);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) exec_child(io, parent, argv_.data(), envp.data(), exec_failed_);
  child.pid = pid;
  child.running = true;
}  // io closes the child's ends of the pipes or of the log file here: only the child holds them now

bool Supervisor::any_running() const {
  for (const Child& c : children_) {
    if (c.running) return true;
  }
  return false;
}

// Forwards what the ranks wrote, waiting up to timeout_ms for something to arrive. False when no pipe is open.
bool Supervisor::pump_output(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, bool>> owners;  // (rank, is stderr)
  for (Child& c : children_) {
    if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0}), owners.push_back({&c, false});
    if (c.err_fd >= 0) fds.push_back({c.err_fd, POLLIN, 0}), owners.push_back({&c, true});
  }
  if (fds.empty()) return false;
  ::poll(fds.data(), fds.size(), timeout_ms);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Child& c = *owners[i].first;
    if (owners[i].second) {
      drain_fd(c.err_fd, *c.err);
    } else {
      drain_fd(c.out_fd, *c.out);
    }
  }
  return true;
}

void Supervisor::reap() {
  for (Child& c : children_) {
    if (!c.running) continue;
    int status = 0;
    const pid_t got = ::waitpid(c.pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    c.running = false;  // reaped, or lost to someone else's wait (the exit stays unknown: exit_code -1)
    c.exit.seconds = seconds_since(start_);
    if (got == c.pid && WIFEXITED(status)) c.exit.exit_code = WEXITSTATUS(status);
    if (got == c.pid && WIFSIGNALED(status)) c.exit.signal = WTERMSIG(status);
    if (!c.exit.ok() && first_failed_ < 0) first_failed_ = c.exit.rank;
  }
}

void Supervisor::signal_running(int sig) {
  for (Child& c : children_) {
    if (c.running) ::kill(c.pid, sig);  // only the ranks this call spawned
  }
}

void Supervisor::stop_others_after_failure() {
  if (!options_.stop_on_failure || first_failed_ < 0 || killed_) return;
  if (!kill_at_) {
    signal_running(SIGTERM);
    kill_at_ = Clock::now() + to_duration(options_.grace_s);
  } else if (Clock::now() >= *kill_at_) {
    signal_running(SIGKILL);
    killed_ = true;
  }
}

void Supervisor::enforce_timeout() {
  if (options_.timeout_s <= 0 || timed_out_ || seconds_since(start_) < options_.timeout_s) return;
  for (Child& c : children_) {
    if (c.running) c.exit.timed_out = true;
  }
  signal_running(SIGKILL);
  timed_out_ = true;
}

// The ranks are gone; read what they left in the pipes. A pipe stays open after that only when a rank left a
// process of its own holding it: that is not waited for longer than the grace period.
void Supervisor::finish_output() {
  const auto give_up = Clock::now() + to_duration(options_.grace_s);
  while (Clock::now() < give_up && pump_output(20)) {
  }
  for (Child& c : children_) {
    for (auto [fd, lines] : {std::make_pair(&c.out_fd, c.out.get()), std::make_pair(&c.err_fd, c.err.get())}) {
      if (*fd < 0) continue;
      lines->finish();
      ::close(*fd);
      *fd = -1;
    }
  }
}

SpawnResult Supervisor::wait() {
  while (any_running()) {
    if (!pump_output(20)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    reap();
    stop_others_after_failure();
    enforce_timeout();
  }
  finish_output();
  SpawnResult result;
  result.first_failed = first_failed_;
  for (Child& c : children_) {
    if (c.err) c.exit.last_line = !c.err->last_line().empty() ? c.err->last_line() : c.out->last_line();
    result.ranks.push_back(c.exit);
  }
  return result;
}

}  // namespace

int RankExit::status() const {
  if (signal != 0) return 128 + signal;
  return exit_code >= 0 ? exit_code : 1;
}

std::string RankExit::describe() const {
  if (timed_out) {
    char text[64];
    std::snprintf(text, sizeof(text), "timed out after %.1f s (killed)", seconds);
    return text;
  }
  if (signal != 0) return "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  if (exit_code >= 0) return "exited with status " + std::to_string(exit_code);
  return "ended with an unknown status";
}

SpawnResult spawn_ranks(const SpawnOptions& options) {
  if (options.nproc < 1) {
    throw EngineryError("nproc must be at least 1, got " + std::to_string(options.nproc), "launcher");
  }
  if (options.argv.empty()) throw EngineryError("no program to start (argv is empty)", "launcher");
  if (!options.log_files.empty() && options.log_files.size() != static_cast<size_t>(options.nproc)) {
    throw EngineryError("one log file per rank needed, got " + std::to_string(options.log_files.size()) + " for " +
                            std::to_string(options.nproc) + " ranks",
                        "launcher");
  }
  Supervisor supervisor(options);
  for (int rank = 0; rank < options.nproc; ++rank) supervisor.start(rank);
  return supervisor.wait();
}

std::string self_executable() {
  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) throw EngineryError("cannot resolve /proc/self/exe", "launcher");
  return std::string(buffer, static_cast<size_t>(n));
}

std::string read_log(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

}  // namespace enginery
