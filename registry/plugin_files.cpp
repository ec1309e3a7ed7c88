#include "registry/plugin_files.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_api/error.h"

namespace enginery {

namespace {

std::string owner_text(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  struct passwd entry {};
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found) {
    out += " (" + std::string(found->pw_name) + ")";
  }
  return out;
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

struct stat stat_of(const std::filesystem::path& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw EngineryError("cannot stat " + what + ": " + std::strerror(errno), path.string());
  }
  return st;
}

// The rules of check_trusted() on an already stat'ed path; `sticky_ok` admits a root-owned sticky directory.
void check_stat(const std::filesystem::path& path, const struct stat& st, const std::string& what, bool sticky_ok) {
  const uid_t me = ::geteuid();
  const std::string allowed_owner = "owned by " + owner_text(me) + (me == 0 ? "" : " or root");
  if (st.st_uid != me && st.st_uid != 0) {
    throw EngineryError(what + " is owned by " + owner_text(st.st_uid) + ", neither the invoking user nor root, " +
                            "so the plugin is refused",
                        path.string(), allowed_owner);
  }
  if (!(st.st_mode & (S_IWGRP | S_IWOTH))) return;
  if (sticky_ok && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) && st.st_uid == 0) return;
  throw EngineryError(what + " is writable by " + ((st.st_mode & S_IWOTH) ? "anyone" : "its group") + " (mode " +
                          mode_text(st.st_mode) + "), so the plugin is refused",
                      path.string(),
                      "writable by its owner only (chmod go-w)" +
                          std::string(sticky_ok ? "; or a root-owned directory with the sticky bit, as /tmp" : ""));
}

}  // namespace

void check_trusted(const std::filesystem::path& path, const std::string& what) {
  check_stat(path, stat_of(path, what), what, false);
}

void check_trusted_directory_chain(const std::filesystem::path& directory, const std::string& what) {
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(directory, ec);
  if (ec) throw EngineryError("cannot resolve " + what + ": " + ec.message(), directory.string());
  check_trusted(resolved, what);
  const std::string above_what = "directory on the plugin's path (above the " + what + ")";
  for (std::filesystem::path above = resolved.parent_path();; above = above.parent_path()) {
    check_stat(above, stat_of(above, above_what), above_what, true);
    if (above.parent_path() == above) break;
  }
}

std::filesystem::path resolve_inside(const std::filesystem::path& directory, const std::string& relative,
                                     const std::string& where) {
  namespace fs = std::filesystem;
  fs::path candidate = directory / relative;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(candidate, ec)) || !fs::exists(candidate, ec)) {
    throw EngineryError("library '" + relative + "' does not exist (looked for " + candidate.string() + ")", where);
  }
  fs::path resolved = fs::canonical(candidate, ec);
  fs::path root = fs::canonical(directory, ec);
  if (ec) throw EngineryError("cannot resolve library path " + candidate.string() + ": " + ec.message(), where);
  auto mismatch = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (mismatch.first != root.end()) {
    throw EngineryError("library '" + relative + "' resolves to " + resolved.string() +
                            ", outside the plugin directory " + root.string(),
                        where, "a library inside the plugin directory");
  }
  if (!fs::is_regular_file(resolved, ec)) {
    throw EngineryError("library '" + relative + "' is not a regular file (" + resolved.string() + ")", where);
  }
  return resolved;
}

}  // namespace enginery
