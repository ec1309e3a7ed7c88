#pragma once
// Reading files whose paths come from users or from other files (config.json, safetensors shards, checkpoint
// metadata): a path may name a FIFO, a device or a directory, and a name read from a file may try to leave its
// directory. These checks come before any open that could block and before any name is joined to a directory
// (docs/ARCHITECTURE.md, "Errors": bad input is a clear error, never a hang or a read elsewhere).
#include <cstdint>
#include <string>

namespace enginery {
namespace input {

// Opens `path` read-only when it is a regular file (symlinks followed) and returns the descriptor (O_CLOEXEC; the
// caller closes it). A FIFO, socket, device or directory is refused before it is opened, and again on the open
// descriptor (the name may be swapped in between), so this never blocks. `what` starts the message of every error
// ("cannot open the model's config.json"); errors name the path.
int open_regular(const std::string& path, const std::string& what);

// The whole content of regular file `path`; a file larger than `max_bytes` is refused naming its size and limit.
std::string read_regular(const std::string& path, uint64_t max_bytes, const std::string& what);

// Throws EngineryError (where: `where`) unless `name`, read from a file, is a relative path that stays inside the
// directory it is joined to: not empty, no NUL byte, not absolute, no ".." component.
void check_name_inside_dir(const std::string& name, const std::string& where);

}  // namespace input
}  // namespace enginery
