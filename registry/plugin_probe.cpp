#include "registry/plugin_probe.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>
#include <utility>

#include "host_api/error.h"
#include "host_api/plugin_api.h"
#include "registry/plugin_library.h"

namespace enginery {
namespace {

constexpr char kFinished = 'k';

class DiscardingRegistrar : public Registrar {
 public:
  void register_engine(const EngineKey&, EngineFactory, EngineTraits) override {}
};

// The child's setup before any plugin code runs: its crash must end it with the signal that caused it (no handler
// inherited from the host, nothing blocked), leave no core file, and not outlive the host.
void prepare_child(pid_t parent) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGINT, SIGTERM}) std::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct rlimit no_core {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  // What the plugin prints to stdout while loading would otherwise show twice; stderr stays for crash messages.
  int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull >= 0) {
    dup2(devnull, STDOUT_FILENO);
    close(devnull);
  }
}

// Runs in the child only, and never returns: _exit skips the host's atexit handlers and static destructors.
[[noreturn]] void run_child(int report_fd, const PluginManifest& manifest, const std::filesystem::path& library,
                            pid_t parent) {
  prepare_child(parent);
  try {
    OpenedLibrary opened = open_plugin_library(library, "probe");
    // A library the host would refuse is not run further: an older API's register_engines expects another
    // Registrar, and calling it would crash here for a reason the host reports better.
    check_plugin_info(*opened.info, manifest);
    DiscardingRegistrar registrar;
    opened.info->register_engines(registrar);
  } catch (...) {
    // Whatever was thrown, the host meets it again in-process and reports it with its full text.
  }
  char finished = kFinished;
  while (write(report_fd, &finished, 1) < 0 && errno == EINTR) {
  }
  _exit(0);
}

struct ProbeResult {
  bool finished = false;      // the child reached the end of run_child
  bool timed_out = false;     // killed at the deadline
  bool status_known = false;  // false when SIGCHLD is ignored and the system reaped the child itself
  int status = 0;
};

// Polls rather than blocks, so the deadline holds even when the plugin forked a process that keeps the pipe open.
ProbeResult await_child(pid_t pid, int report_fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ProbeResult result;
  for (;;) {
    int status = 0;
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      result.status_known = true;
      result.status = status;
      break;
    }
    if (done < 0 && errno != EINTR) break;  // ECHILD: SIGCHLD is ignored and the child is gone
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      result.timed_out = true;
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  char byte = 0;
  result.finished = read(report_fd, &byte, 1) == 1 && byte == kFinished;
  return result;
}

std::string duration_text(std::chrono::milliseconds duration) {
  if (duration.count() % 1000 == 0) return std::to_string(duration.count() / 1000) + " s";
  return std::to_string(duration.count()) + " ms";
}

// Empty when the probe passed.
std::string failure_of(const ProbeResult& result, std::chrono::milliseconds timeout) {
  const std::string doing = "while its library was loaded and its engines registered in a probe process";
  if (result.timed_out) return "did not finish within " + duration_text(timeout) + " " + doing + " (killed)";
  if (result.status_known && WIFSIGNALED(result.status)) {
    const int sig = WTERMSIG(result.status);
    const char* text = strsignal(sig);
    return "crashed with " + signal_name(sig) + (text ? std::string(" (") + text + ")" : "") + " " + doing;
  }
  if (result.finished) return "";
  if (result.status_known && WIFEXITED(result.status)) {
    return "ended the process with exit status " + std::to_string(WEXITSTATUS(result.status)) + " " + doing +
           " (a plugin must return from loading and registration, never exit)";
  }
  return "the probe process ended without reporting " + doing + " (its exit status is unknown)";
}

}  // namespace

std::string signal_name(int signal) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGSEGV, "SIGSEGV"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},
      {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
      {SIGPIPE, "SIGPIPE"}, {SIGHUP, "SIGHUP"},   {SIGQUIT, "SIGQUIT"}, {SIGALRM, "SIGALRM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}};
  for (const auto& [number, name] : kNames) {
    if (number == signal) return name;
  }
  return "signal " + std::to_string(signal);
}

void probe_plugin(const PluginManifest& manifest, const std::filesystem::path& library, const std::string& where,
                  std::chrono::milliseconds timeout) {
  int report[2];
  if (pipe2(report, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw EngineryError(std::string("cannot create the probe process's pipe: ") + std::strerror(errno), where);
  }
  // Unwritten output would otherwise be written twice, once by each process.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(report[0]);
    close(report[1]);
    throw EngineryError(std::string("cannot fork the probe process: ") + std::strerror(error), where);
  }
  if (pid == 0) {
    close(report[0]);
    run_child(report[1], manifest, library, parent);
  }
  close(report[1]);
  const ProbeResult result = await_child(pid, report[0], timeout);
  close(report[0]);
  const std::string failure = failure_of(result, timeout);
  if (!failure.empty()) {
    throw EngineryError(failure + "; the host did not load it", where,
                        "a plugin whose loading and registration return normally");
  }
}

}  // namespace enginery
