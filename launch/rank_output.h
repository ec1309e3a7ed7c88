#pragma once
// Forwarding a rank's stdout or stderr line by line, each line prefixed with "[rank k] " so the ranks' output
// interleaves readably, and remembering the last meaningful line (not blank, not a backtrace frame) for the
// failure message.
#include <cstddef>
#include <iosfwd>
#include <string>
#include <utility>

namespace enginery {

class PrefixedLines {
 public:
  // stream may be null: the lines are only remembered.
  PrefixedLines(std::string prefix, std::ostream* stream) : prefix_(std::move(prefix)), stream_(stream) {}

  // Writes every complete line of what has arrived so far; keeps the rest for the next call.
  void append(const char* data, size_t n);
  // Writes the unterminated rest, if any (the writer is gone).
  void finish();
  const std::string& last_line() const { return last_line_; }

 private:
  void write(const std::string& line);

  std::string prefix_;
  std::ostream* stream_;
  std::string partial_;
  std::string last_line_;
};

// Reads what is available on the non-blocking (or, once the writer has exited, blocking) fd into `lines`; at end
// of file it finishes `lines`, closes fd and sets it to -1.
void drain_fd(int& fd, PrefixedLines& lines);

}  // namespace enginery
