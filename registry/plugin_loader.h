#pragma once
// PluginLoader: finds plugin manifests on the search path, reads all of them before opening any library, then
// loads each plugin that passes every check into an EngineRegistry (docs/ARCHITECTURE.md, "Plugins and packaging"). A plugin that fails a
// check is reported with a reason a person can act on and leaves the registry exactly as it was, and claims nothing:
// a plugin name belongs to the first plugin on the search path that loads under it, and a later one of that name is
// shadowed (ShadowedPlugin), never opened.
//
// Before a library is opened: its files and every directory above them must be owned by the invoking user or root
// and writable by nobody else (plugin_files.h), its sha256 must equal the manifest's, and a probe process must load
// and register it without dying (plugin_probe.h), so a crashing plugin is skipped, never fatal to the host.
//
// A search directory is either a plugin directory itself (it holds plugin.toml) or holds one subdirectory per
// plugin (build-*/plugins/<name>/plugin.toml, <libdir>/enginery/plugins/<name>/plugin.toml).
#include <filesystem>
#include <string>
#include <vector>

#include "registry/engine_registry.h"
#include "registry/manifest.h"

namespace enginery {

constexpr const char* kPluginPathEnv = "ENGINERY_PLUGIN_PATH";
constexpr const char* kManifestFileName = "plugin.toml";
// Set to 1, lets a plugin whose manifest has no sha256 load, with a warning on stderr per plugin: for development.
constexpr const char* kAllowUnverifiedPluginsEnv = "ENGINERY_ALLOW_UNVERIFIED_PLUGINS";

struct PluginSearchDir {
  std::filesystem::path path;
  std::string source;       // "--plugin-dir", "config", "ENGINERY_PLUGIN_PATH", "install default", ...
  bool must_exist = true;   // a missing directory is reported as a rejection unless false
  // Named by the user (--plugin-dir, plugins.dirs): it must exist and at least one plugin found through it must
  // load, else the report's unusable_dirs says why; the caller fails, never goes on with the rest of the path.
  bool required = false;
};

struct LoadedPlugin {
  PluginManifest manifest;
  std::filesystem::path library;  // resolved path of the opened library
  bool verified = true;           // false: loaded without a sha256 because ENGINERY_ALLOW_UNVERIFIED_PLUGINS=1
};

struct RejectedPlugin {
  std::filesystem::path path;  // the plugin.toml, or the search directory when there was none
  std::string name;            // from the manifest when it could be read
  std::string reason;
};

// A plugin not loaded because a plugin of the same name already loaded from earlier on the search path: the same
// plugin found twice (a copy on --plugin-dir and the bundled one), or another build that the earlier directory
// shadows, as an earlier PATH entry does. Not a rejection: `note` says which one is in use and why.
struct ShadowedPlugin {
  std::filesystem::path path;    // its plugin.toml
  std::string name;
  std::filesystem::path loaded;  // the plugin.toml of the plugin that loaded under this name
  std::string note;              // one line naming both
};

// A required search directory that gave nothing: `message` names it and its source ("--plugin-dir /typo does not
// exist", "... holds no plugin that loads: ...").
struct UnusableDir {
  PluginSearchDir dir;
  std::string message;
};

struct PluginLoadReport {
  std::vector<PluginSearchDir> searched;
  std::vector<LoadedPlugin> loaded;
  std::vector<RejectedPlugin> rejected;
  std::vector<ShadowedPlugin> shadowed;
  std::vector<UnusableDir> unusable_dirs;
  bool ok() const { return rejected.empty() && unusable_dirs.empty(); }
};

// Throws EngineryError naming the first unusable required directory and its source (with the others, if any), so
// an explicit directory that gave nothing stops the command instead of leaving the rest of the search path (say
// ENGINERY_PLUGIN_PATH) to stand in for it.
void check_required_dirs(const PluginLoadReport& report);

class PluginLoader {
 public:
  explicit PluginLoader(std::vector<PluginSearchDir> search_path);

  // The search path in order: `dirs` (e.g. from the config or --plugin-dir), then each entry of `env_plugin_path`
  // (colon-separated, as ENGINERY_PLUGIN_PATH; null or empty: none), then `install_default` (skipped quietly when
  // it does not exist or is empty).
  static std::vector<PluginSearchDir> search_path(const std::vector<std::filesystem::path>& dirs,
                                                  const std::string& dirs_source, const char* env_plugin_path,
                                                  const std::filesystem::path& install_default);

  const std::vector<PluginSearchDir>& search_dirs() const { return search_path_; }

  // Loads every plugin found into `registry`. Never throws for a bad plugin: it is reported instead.
  PluginLoadReport load(EngineRegistry& registry) const;

 private:
  std::vector<PluginSearchDir> search_path_;
};

}  // namespace enginery
