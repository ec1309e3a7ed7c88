#include "support/durable_fs.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <set>

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

// <parent>/.<name><suffix>: the names this file gives a directory while it is built, replaced or removed.
fs::path hidden_sibling(const fs::path& path, const char* suffix) {
  return parent_of(path) / ("." + path.filename().string() + suffix);
}

// Whether anything (a dangling link too) has this name.
bool exists_here(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename " + from.string() + " to", to, errno);
}

// Renames `dir` to `doomed` (made durable) before removing it, so a kill mid-way leaves a half-removed directory
// only under a hidden name that finish_interrupted() knows, never under a published one.
void remove_via_hidden_name(const fs::path& dir, const fs::path& doomed) {
  std::error_code ec;
  compat::remove_all(doomed, ec);
  if (ec) fail("cannot remove", doomed, ec.value());
  rename_or_fail(dir, doomed);
  sync_path(parent_of(doomed));
  compat::remove_all(doomed, ec);
  if (ec) fail("cannot remove", doomed, ec.value());
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

fs::path temp_dir_for(const fs::path& final_path) { return hidden_sibling(final_path, kTempSuffix); }

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
  if (!exists_here(final_path)) {
    rename_or_fail(temp_dir, final_path);
    sync_path(parent);
    return;
  }
  if (::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
    sync_path(parent);
    remove_via_hidden_name(temp_dir, hidden_sibling(final_path, kDeletingSuffix));  // now the previous one
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
    fail("cannot exchange " + temp_dir.string() + " with", final_path, errno);
  }
  // No exchange on this file system (NFS): the previous one goes aside first. A kill before the second rename
  // leaves it only there, and finish_interrupted() puts it back.
  finish_interrupted(final_path);
  const fs::path aside = hidden_sibling(final_path, kReplacedSuffix);
  rename_or_fail(final_path, aside);
  rename_or_fail(temp_dir, final_path);
  sync_path(parent);
  remove_via_hidden_name(aside, hidden_sibling(final_path, kDeletingSuffix));
}

void retire_dir(const fs::path& dir) { remove_via_hidden_name(dir, hidden_sibling(dir, kDeletingSuffix)); }

std::vector<std::string> finish_interrupted(const fs::path& final_path) {
  std::vector<std::string> done;
  const fs::path aside = hidden_sibling(final_path, kReplacedSuffix);
  const fs::path doomed = hidden_sibling(final_path, kDeletingSuffix);
  if (exists_here(aside)) {
    if (exists_here(final_path)) {
      remove_via_hidden_name(aside, doomed);
      done.push_back("removed " + aside.string() + ", the copy a finished replacement of " + final_path.string() +
                     " had set aside");
    } else {
      rename_or_fail(aside, final_path);
      sync_path(parent_of(final_path));
      done.push_back("restored " + final_path.string() + " from " + aside.string() +
                     " (its replacement was interrupted before the new copy arrived)");
    }
  }
  if (exists_here(doomed)) {
    std::error_code ec;
    compat::remove_all(doomed, ec);
    if (ec) fail("cannot remove", doomed, ec.value());
    done.push_back("removed " + doomed.string() + ", left by an interrupted removal");
  }
  return done;
}

std::vector<std::string> finish_interrupted_checkpoints(const fs::path& root) {
  std::set<std::string> interrupted;  // global_step_<N> names, collected before anything is renamed
  std::error_code ec;
  const fs::path dir = root.empty() ? fs::path(".") : root;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* suffix : {kDeletingSuffix, kReplacedSuffix}) {
      const std::string published = published_name_of(name, suffix);
      if (global_step_of(published) >= 0) interrupted.insert(published);
    }
  }
  std::vector<std::string> done;
  for (const std::string& name : interrupted) {
    for (std::string& line : finish_interrupted(dir / name)) done.push_back(std::move(line));
  }
  return done;
}

std::vector<std::string> foreign_entries(const fs::path& dir, const std::set<std::string>& ours) {
  std::vector<std::string> foreign;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ours.count(name) == 0) foreign.push_back(name);
  }
  if (ec) fail("cannot list", dir, ec.value());
  std::sort(foreign.begin(), foreign.end());
  return foreign;
}

std::string published_name_of(const std::string& hidden_name, const std::string& suffix) {
  const size_t n = hidden_name.size(), k = suffix.size();
  if (n <= 1 + k || hidden_name.front() != '.' || hidden_name.compare(n - k, k, suffix) != 0) return "";
  return hidden_name.substr(1, n - 1 - k);
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
