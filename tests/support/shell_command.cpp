#include "tests/support/shell_command.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>

namespace enginery {
namespace test_support {

CommandResult run_shell(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace test_support
}  // namespace enginery
