#include "registry/plugin_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host_api/error.h"

namespace enginery {

void check_writable_only_by_owner(const std::filesystem::path& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw EngineryError("cannot stat " + what + ": " + std::strerror(errno), path.string());
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw EngineryError(what + " is writable by " + ((st.st_mode & S_IWOTH) ? "anyone" : "its group") +
                            " (mode " + mode + "), so the plugin is refused",
                        path.string(), "writable by its owner only (chmod go-w)");
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
