#include "tests/fuzz/targets.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <system_error>

#include "host_api/error.h"

namespace enginery {
namespace fuzz {
namespace {

// Owns the scratch directory; its destructor runs at normal exit (a crashing run leaves it behind on purpose:
// the crash input is saved separately).
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    path = std::filesystem::temp_directory_path() / ("enginery_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

const std::vector<Target>& all_targets() {
  static const std::vector<Target> targets = {config_target(), config_overrides_target(), manifest_target(),
                                              safetensors_target(), checkpoint_target(),
                                              data_jsonl_target()};
  return targets;
}

const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("enginery_fuzz: cannot write " + path.string());
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw EngineryError("cannot read", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path source_dir() { return ENGINERY_SOURCE_DIR; }

}  // namespace fuzz
}  // namespace enginery
