#pragma once
// Helpers of the loader tests: fresh temp directories, copies of the built test plugins, manifests written on
// the spot so each case can vary one thing (a field, a permission, a digest).
#include <filesystem>
#include <string>
#include <vector>

#include "host_api/plugin_api.h"
#include "host_api/version.h"

namespace enginery::test {

namespace fs = std::filesystem;

// The library the build made for test plugin `target` (tests/registry/CMakeLists.txt).
fs::path built_plugin_library(const std::string& target);
// The sha256 CMake wrote into the rendered manifest of a built test plugin: a digest computed by another tool.
std::string rendered_sha256(const std::string& target);

// A fresh directory (mode 0700) removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct ManifestSpec {
  std::string name;
  std::string library;
  std::vector<EngineKey> engines;
  std::string api_version = std::to_string(kContractVersion);
  std::string extra;  // more top-level lines: "sha256 = ..." from spec_for; a case may replace it
};

// The manifest a well-behaved test plugin would ship: its name, its library and its sha256 (rendered_sha256), the
// two engines it registers.
ManifestSpec spec_for(const std::string& target, const std::string& backend);
std::string manifest_text(const ManifestSpec& spec);

void write_file(const fs::path& file, const std::string& text, fs::perms perms = fs::perms(0644));
fs::path make_dir(const fs::path& dir);  // mode 0755

// <parent>/<dir_name>/ holding a copy of `target`'s library (mode 0755) and plugin.toml (mode 0644) with `text`;
// returns the plugin directory. An empty target copies no library.
fs::path make_plugin(const fs::path& parent, const std::string& dir_name, const std::string& target,
                     const std::string& manifest);

}  // namespace enginery::test
