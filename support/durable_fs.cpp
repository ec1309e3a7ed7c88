#include "support/durable_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

#include "host_api/error.h"
#include "support/torch_compat.h"  // compat::remove_all

namespace fs = std::filesystem;

namespace enginery {
namespace durable {
namespace {

[[noreturn]] void fail(const std::string& what, const fs::path& path, int err) {
  throw EngineryError(what + ": " + std::strerror(err), path.string());
}

fs::path parent_of(const fs::path& path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

}  // namespace

void sync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open to fsync", path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on a directory (EINVAL): nothing more can be done there.
  if (rc != 0 && !(err == EINVAL && fs::is_directory(path))) fail("fsync failed", path, err);
}

void write_file(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", path, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      fail("write failed", path, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fsync failed", path, err);
  }
  if (::close(fd) != 0) fail("close failed", path, errno);
}

void replace_file(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = parent_of(path) / ("." + path.filename().string() + ".tmp");
  write_file(tmp, bytes);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp.string() + " to", path, errno);
  sync_path(parent_of(path));
}

fs::path temp_dir_for(const fs::path& final_path) {
  return parent_of(final_path) / ("." + final_path.filename().string() + ".tmp");
}

void fresh_dir(const fs::path& dir) {
  std::error_code ec;
  compat::remove_all(dir, ec);
  if (ec) fail("cannot remove the leftover", dir, ec.value());
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create", dir, ec.value());
}

void publish_dir(const fs::path& temp_dir, const fs::path& final_path) {
  sync_path(temp_dir);
  const fs::path parent = parent_of(final_path);
  fs::path aside;
  if (fs::exists(final_path)) {
    aside = parent / ("." + final_path.filename().string() + ".replaced");
    std::error_code ec;
    compat::remove_all(aside, ec);
    if (::rename(final_path.c_str(), aside.c_str()) != 0) fail("cannot move the old checkpoint aside", final_path, errno);
  }
  if (::rename(temp_dir.c_str(), final_path.c_str()) != 0) {
    fail("cannot rename " + temp_dir.string() + " to", final_path, errno);
  }
  sync_path(parent);
  if (!aside.empty()) {
    std::error_code ec;
    compat::remove_all(aside, ec);
  }
}

void retire_dir(const fs::path& dir) {
  const fs::path parent = parent_of(dir);
  const fs::path doomed = parent / ("." + dir.filename().string() + ".deleting");
  std::error_code ec;
  compat::remove_all(doomed, ec);
  if (::rename(dir.c_str(), doomed.c_str()) != 0) fail("cannot retire", dir, errno);
  sync_path(parent);
  compat::remove_all(doomed, ec);
  if (ec) fail("cannot remove", doomed, ec.value());
}

int64_t global_step_of(const fs::path& dir) {
  static const std::string kPrefix = "global_step_";
  const std::string name = dir.filename().string();
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  int64_t n = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || n > (INT64_MAX - 9) / 10) return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

std::vector<fs::path> retain_newest(const fs::path& just_written, int64_t max_keep, const std::string& complete_marker) {
  std::vector<fs::path> removed;
  if (max_keep <= 0 || global_step_of(just_written) < 0) return removed;
  std::vector<std::pair<int64_t, fs::path>> complete;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent_of(just_written), ec)) {
    const int64_t step = global_step_of(entry.path());
    if (step < 0 || entry.path().filename() == just_written.filename()) continue;
    if (entry.is_directory() && fs::exists(entry.path() / complete_marker)) complete.emplace_back(step, entry.path());
  }
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // just_written is one of the kept ones.
  for (size_t i = static_cast<size_t>(max_keep - 1); i < complete.size(); ++i) {
    retire_dir(complete[i].second);
    removed.push_back(complete[i].second);
  }
  return removed;
}

}  // namespace durable
}  // namespace enginery
