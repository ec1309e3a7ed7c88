#pragma once
// File-system checks done before any plugin code runs: who owns and who may write the plugin's files and every
// directory above them, and whether the library a manifest names really lies inside the plugin's directory.
#include <filesystem>
#include <string>

namespace enginery {

// Throws EngineryError naming `path` when the file or directory (followed through symlinks) is owned by anyone but
// the invoking user (geteuid) or root, or is writable by its group or by others: whoever can write it can make the
// host run their code. `what` says what it is ("plugin library", ...).
void check_trusted(const std::filesystem::path& path, const std::string& what);

// check_trusted() for `directory` itself, then the same rules for every directory above it up to /, resolved
// through symlinks, except that a root-owned directory with the sticky bit (/tmp) may be writable by anyone:
// nobody but root and the owners of its entries can rename or remove them.
void check_trusted_directory_chain(const std::filesystem::path& directory, const std::string& what);

// Resolves `relative` inside `directory` (both through symlinks) and throws EngineryError at `where` when the
// result is missing, not a regular file, or outside `directory`. Returns the resolved path.
std::filesystem::path resolve_inside(const std::filesystem::path& directory, const std::string& relative,
                                     const std::string& where);

}  // namespace enginery
