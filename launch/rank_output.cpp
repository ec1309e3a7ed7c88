#include "launch/rank_output.h"

#include <unistd.h>

#include <cerrno>
#include <ostream>

namespace enginery {
namespace {

// A line worth quoting as the rank's last word: not blank, and not part of a LibTorch backtrace (c10::Error
// messages end with "Exception raised from ..." and "frame #N: ..." lines, which say nothing to a user).
bool meaningful(const std::string& line) {
  const size_t start = line.find_first_not_of(" \t\r");
  if (start == std::string::npos) return false;
  return line.compare(start, 7, "frame #") != 0 && line.compare(start, 21, "Exception raised from") != 0;
}

}  // namespace

void PrefixedLines::write(const std::string& line) {
  if (stream_ != nullptr) *stream_ << prefix_ << line << '\n';
}

void PrefixedLines::append(const char* data, size_t n) {
  partial_.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = partial_.substr(start, nl - start);
    write(line);
    if (meaningful(line)) last_line_ = std::move(line);
  }
  partial_.erase(0, start);
  if (stream_ != nullptr) stream_->flush();
}

void PrefixedLines::finish() {
  if (!partial_.empty()) {
    write(partial_);
    if (meaningful(partial_)) last_line_ = partial_;
    partial_.clear();
  }
  if (stream_ != nullptr) stream_->flush();
}

void drain_fd(int& fd, PrefixedLines& lines) {
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      lines.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    lines.finish();  // end of file or an error: the rank is gone
    ::close(fd);
    fd = -1;
    return;
  }
}

}  // namespace enginery
