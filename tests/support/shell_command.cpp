#include "tests/support/shell_command.h"

#include <signal.h>
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

BackgroundCommand::BackgroundCommand(const std::string& command) {
  pipe_ = popen(("echo $$; " + command).c_str(), "r");
  if (pipe_ != nullptr && fscanf(pipe_, "%ld", &pid_) != 1) pid_ = 0;
}

BackgroundCommand::~BackgroundCommand() {
  if (pipe_ == nullptr) return;
  if (pid_ > 1) ::kill(static_cast<pid_t>(pid_), SIGKILL);
  pclose(pipe_);
}

int BackgroundCommand::wait() {
  const int status = pipe_ == nullptr ? -1 : pclose(pipe_);
  pipe_ = nullptr;
  return status;
}

}  // namespace test_support
}  // namespace enginery
