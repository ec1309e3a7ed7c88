#pragma once
// A crash (or a hang) is a finding too, but it ends the process: before each input the driver names the file the
// input is written to if a fatal signal or the per-input alarm arrives, the way libFuzzer leaves crash-* files.
#include <cstddef>
#include <string>

namespace enginery {
namespace fuzz {

// Installs the handlers (on an alternate stack, so a stack overflow can still be reported).
void install_crash_guard();

// The input about to run, where to save it on a crash or after `timeout_s` seconds, and what to print.
// The strings must outlive the run; end_input() disarms.
void begin_input(const std::string& input, const std::string& crash_path, const std::string& label,
                 unsigned timeout_s);
void end_input();

}  // namespace fuzz
}  // namespace enginery
