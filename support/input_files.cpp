#include "support/input_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "host_api/error.h"

namespace enginery {
namespace input {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

[[noreturn]] void not_regular(mode_t mode, const std::string& path, const std::string& what) {
  throw EngineryError(what + ": it is " + kind_of(mode) + ", not a regular file", path, "a regular file");
}

}  // namespace

int open_regular(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw EngineryError(what + ": " + std::strerror(errno), path);
  if (!S_ISREG(st.st_mode)) not_regular(st.st_mode, path, what);
  // O_NONBLOCK: should a FIFO replace the file after the stat, open returns at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw EngineryError(what + ": " + std::strerror(errno), path);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (S_ISREG(st.st_mode)) throw EngineryError(what + ": " + std::strerror(err), path);
    not_regular(st.st_mode, path, what);
  }
  return fd;
}

std::string read_regular(const std::string& path, uint64_t max_bytes, const std::string& what) {
  const int fd = open_regular(path, what);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw EngineryError(what + ": " + std::strerror(err), path);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw EngineryError(what + ": the file has " + std::to_string(st.st_size) + " bytes", path,
                        "at most " + std::to_string(max_bytes) + " bytes");
  }
  std::string text;
  try {
    text.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    ::close(fd);
    throw EngineryError(what + ": not enough memory for its " + std::to_string(st.st_size) + " bytes", path);
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, &text[done], text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw EngineryError(what + ": " + std::strerror(err), path);
    }
    if (n == 0) break;  // shrank since the fstat: read what is there
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

void check_name_inside_dir(const std::string& name, const std::string& where) {
  auto refuse = [&](const std::string& why) {
    std::string shown;  // a NUL would cut the message short where it is printed
    for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    throw EngineryError("file name '" + shown + "' " + why, where,
                        "a relative path inside the directory, without '..'");
  };
  if (name.empty()) refuse("is empty");
  if (name.find('\0') != std::string::npos) refuse("contains a NUL byte");
  if (name.front() == '/') refuse("is absolute");
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = std::min(name.find('/', start), name.size());
    if (name.compare(start, slash - start, "..") == 0) refuse("leaves its directory");
    start = slash + 1;
  }
}

}  // namespace input
}  // namespace enginery
