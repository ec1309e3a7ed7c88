#pragma once
// plugin.toml: what a plugin is, before any of its code runs (docs/ARCHITECTURE.md, "Plugins and packaging"):
// identity and checksum only; what its engines can do they declare at registration (EngineTraits).
//
//   name = "enginery_fsdp"            # letters, digits, '_', '-', '.'
//   version = "0.1.0"                 # the plugin's own version, free-form
//   api_version = "3"                 # the contract version the plugin was built against (host_api/version.h)
//   library = "libenginery_fsdp.so"   # relative to the manifest's directory, never outside it
//   sha256 = "..."                    # the library file's SHA-256, 64 hex digits: the parser accepts a manifest
//                                     # without it, the loader refuses it (plugin_loader.h)
//   [[engines]]                       # at least one
//   model_type = "language_model"
//   backend = "fsdp"
//   device = "cpu"
//
// A 2.x manifest (api_version "2.N", manifest_version, capabilities) is refused by name, pointing to the migration
// table of docs/PLUGIN_GUIDE.md.
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
  std::string where;  // file:line:col of its [[engines]] table
};

struct PluginManifest {
  std::filesystem::path file;  // the plugin.toml as given (absolute when the loader found it)
  std::string name;
  std::string version;
  int api_version = 0;
  std::string library;                 // as written: a relative path inside the manifest's directory
  std::optional<std::string> sha256;   // lowercase hex
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
