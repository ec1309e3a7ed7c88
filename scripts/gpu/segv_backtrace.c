// LD_PRELOAD helper for the GPU machine, which has no gdb: on SIGSEGV / SIGABRT / SIGBUS prints the native stack
// (backtrace_symbols_fd: "library(symbol+offset)" or "library(+offset)") to stderr, then dies of the same signal.
// scripts/gpu/diagnose_python_group.sh builds it and resolves the offsets with addr2line.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void print_stack(int sig) {
  static const char header[] = "\n*** native stack (segv_backtrace) ***\n";
  void* frames[96];
  const int n = backtrace(frames, 96);
  write(2, header, sizeof header - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = print_stack;
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGSEGV, &action, NULL);
  sigaction(SIGBUS, &action, NULL);
  sigaction(SIGABRT, &action, NULL);
}
