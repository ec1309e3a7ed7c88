#pragma once
// A command run through the shell by a test: its exit status, everything it printed on stdout (the callers add
// 2>&1 to take stderr too) and its wall time.
#include <cstdio>
#include <string>

namespace enginery {
namespace test_support {

struct CommandResult {
  int status = -1;  // the exit status, -1 when it did not exit normally
  std::string output;
  double seconds = 0;
};

CommandResult run_shell(const std::string& command);

// A command started through the shell without waiting for it, run as "echo $$; <command>" so that pid() is the
// shell's (the command's own when it starts with exec). A command not waited for is killed (SIGKILL) and reaped
// when this goes out of scope: a stopped rank never exits by itself.
class BackgroundCommand {
 public:
  explicit BackgroundCommand(const std::string& command);
  ~BackgroundCommand();
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;
  long pid() const { return pid_; }  // 0 when it did not start
  int wait();                        // pclose's status; once

 private:
  FILE* pipe_ = nullptr;
  long pid_ = 0;
};

}  // namespace test_support
}  // namespace enginery
