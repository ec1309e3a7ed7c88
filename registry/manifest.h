#pragma once
// plugin.toml: what a plugin declares before any of its code runs (docs/ARCHITECTURE.md, "Plugins and packaging"). Schema, version 1:
//
//   manifest_version = 1
//   name = "enginery_fsdp"            # letters, digits, '_', '-', '.'
//   version = "0.1.0"                 # the plugin's own version, free-form
//   api_version = "2.6"               # host_api MAJOR.MINOR the plugin was built against
//   library = "libenginery_fsdp.so"   # relative to the manifest's directory, never outside it
//   sha256 = "..."                    # the library file's SHA-256, 64 hex digits: the parser accepts a manifest
//                                     # without it, the loader refuses it (plugin_loader.h)
//   capabilities = ["fp16", ...]      # optional: flags that apply to every engine
//   [[engines]]                       # at least one
//   model_type = "language_model"
//   backend = "fsdp"
//   device = "cpu"
//   capabilities = ["hsdp"]           # optional: flags of this engine only
//
// Every error names file:line:col of the offending key or value and, where the set is closed, what is allowed.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host_api/plugin_api.h"

namespace enginery {

struct ManifestEngine {
  EngineKey key;
  std::vector<std::string> capabilities;  // the engine's own plus the manifest's top-level ones, sorted, unique
  std::string where;                      // file:line:col of its [[engines]] table
};

struct PluginManifest {
  std::filesystem::path file;  // the plugin.toml as given (absolute when the loader found it)
  int manifest_version = 0;
  std::string name;
  std::string version;
  int api_major = 0;
  int api_minor = 0;
  std::string library;                 // as written: a relative path inside the manifest's directory
  std::optional<std::string> sha256;   // lowercase hex
  std::vector<std::string> capabilities;
  std::vector<ManifestEngine> engines;

  // file:line:col of fields the loader checks later against the library itself.
  std::string api_version_where;
  std::string library_where;
  std::string sha256_where;

  std::filesystem::path directory() const { return file.parent_path(); }
  std::filesystem::path library_path() const { return directory() / library; }
};

// Parses and validates a manifest; throws EngineryError with file:line:col on any problem.
PluginManifest parse_manifest(const std::filesystem::path& file);
// Same, for text already in memory; `file` is used for messages and library_path().
PluginManifest parse_manifest_text(std::string_view text, const std::filesystem::path& file);

}  // namespace enginery
