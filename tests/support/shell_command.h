#pragma once
// A command run through the shell by a test: its exit status, everything it printed on stdout (the callers add
// 2>&1 to take stderr too) and its wall time.
#include <string>

namespace enginery {
namespace test_support {

struct CommandResult {
  int status = -1;  // the exit status, -1 when it did not exit normally
  std::string output;
  double seconds = 0;
};

CommandResult run_shell(const std::string& command);

}  // namespace test_support
}  // namespace enginery
