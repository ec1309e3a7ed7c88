#pragma once
// File-system checks done before any plugin code runs: who may write the plugin's files, and whether the library
// a manifest names really lies inside the plugin's directory.
#include <filesystem>
#include <string>

namespace enginery {

// Throws EngineryError when `path` (followed through symlinks) is writable by its group or by others: anyone who
// can write it can make the host run their code.
void check_writable_only_by_owner(const std::filesystem::path& path, const std::string& what);

// Resolves `relative` inside `directory` (both through symlinks) and throws EngineryError at `where` when the
// result is missing, not a regular file, or outside `directory`. Returns the resolved path.
std::filesystem::path resolve_inside(const std::filesystem::path& directory, const std::string& relative,
                                     const std::string& where);

}  // namespace enginery
