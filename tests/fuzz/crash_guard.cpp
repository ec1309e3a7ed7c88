#include "tests/fuzz/crash_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace enginery {
namespace fuzz {
namespace {

// Read by the signal handler: plain pointers, set before the input runs.
const char* g_data = nullptr;
size_t g_size = 0;
const char* g_path = nullptr;
const char* g_label = nullptr;

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t written = ::write(fd, p, n);
    if (written <= 0) return;
    p += written;
    n -= static_cast<size_t>(written);
  }
}

void say(const char* text) { write_all(2, text, std::strlen(text)); }

const char* signal_text(int sig) {
  switch (sig) {
    case SIGSEGV: return "crashed (SIGSEGV)";
    case SIGBUS: return "crashed (SIGBUS)";
    case SIGABRT: return "aborted (SIGABRT: std::terminate, an assertion or a failed allocation)";
    case SIGFPE: return "crashed (SIGFPE)";
    case SIGILL: return "crashed (SIGILL)";
    case SIGALRM: return "ran past its time limit (a hang)";
    default: return "died of a signal";
  }
}

// Only async-signal-safe calls: open/write/close, then the default action.
extern "C" void on_fatal_signal(int sig) {
  say("enginery_fuzz: FINDING: ");
  say(g_label ? g_label : "the driver");
  say(" ");
  say(signal_text(sig));
  if (g_data != nullptr && g_path != nullptr) {
    const int fd = ::open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      write_all(fd, g_data, g_size);
      ::close(fd);
      say("; input saved to ");
      say(g_path);
    }
  }
  say("\n");
  if (sig == SIGALRM) ::_exit(3);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_guard() {
  static std::vector<char> stack(256 * 1024);
  stack_t alt{};
  alt.ss_sp = stack.data();
  alt.ss_size = stack.size();
  ::sigaltstack(&alt, nullptr);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  action.sa_flags = SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGALRM}) ::sigaction(sig, &action, nullptr);
}

void begin_input(const std::string& input, const std::string& crash_path, const std::string& label,
                 unsigned timeout_s) {
  g_data = input.data();
  g_size = input.size();
  g_path = crash_path.c_str();
  g_label = label.c_str();
  ::alarm(timeout_s);
}

void end_input() {
  ::alarm(0);
  g_data = nullptr;
}

}  // namespace fuzz
}  // namespace enginery
