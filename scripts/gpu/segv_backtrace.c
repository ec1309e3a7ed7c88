// LD_PRELOAD helper for the GPU machine, which has no gdb: on SIGSEGV / SIGABRT / SIGBUS prints the native stack
// (backtrace_symbols_fd: "library(symbol+offset)" or "library(+offset)") to stderr, then the faulting pc and every
// word near the stack pointer that points into a loaded library's code ("scan lib+0xOFF"): when the pc is garbage
// (a call through a bad pointer) the unwinder stops at once, and the scan still finds the caller. Then it dies of
// the same signal. scripts/gpu/diagnose_python_group.sh builds it and resolves the offsets with addr2line.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void say(const char* text) {
  if (write(2, text, strlen(text)) < 0) return;
}

static void print_code_address(const char* tag, uintptr_t address) {
  Dl_info info;
  if (address == 0 || dladdr((void*)address, &info) == 0 || info.dli_fname == NULL) return;
  char line[512];
  snprintf(line, sizeof line, "%s %s+0x%lx\n", tag, info.dli_fname, (unsigned long)(address - (uintptr_t)info.dli_fbase));
  say(line);
}

static void print_stack(int sig, siginfo_t* info, void* context) {
  (void)info;
  void* frames[96];
  const int n = backtrace(frames, 96);
  say("\n*** native stack (segv_backtrace) ***\n");
  backtrace_symbols_fd(frames, n, 2);
  const ucontext_t* uc = (const ucontext_t*)context;
  print_code_address("pc", (uintptr_t)uc->uc_mcontext.gregs[REG_RIP]);
  const uintptr_t* sp = (const uintptr_t*)uc->uc_mcontext.gregs[REG_RSP];
  for (int i = 0; i < 64; ++i) print_code_address("scan", sp[i]);
  raise(sig);  // SA_RESETHAND has put the default action back
}

__attribute__((constructor)) static void install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = print_stack;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &action, NULL);
  sigaction(SIGBUS, &action, NULL);
  sigaction(SIGABRT, &action, NULL);
}
