#include "launch/rank_output.h"

#include <unistd.h>

#include <cerrno>
#include <ostream>

namespace enginery {

void PrefixedLines::write(const std::string& line) {
  if (stream_ != nullptr) *stream_ << prefix_ << line << '\n';
}

void PrefixedLines::append(const char* data, size_t n) {
  partial_.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = partial_.substr(start, nl - start);
    write(line);
    if (line.find_first_not_of(" \t\r") != std::string::npos) last_line_ = std::move(line);
  }
  partial_.erase(0, start);
  if (stream_ != nullptr) stream_->flush();
}

void PrefixedLines::finish() {
  if (!partial_.empty()) {
    write(partial_);
    last_line_ = partial_;
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
