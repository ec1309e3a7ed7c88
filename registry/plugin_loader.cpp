#include "registry/plugin_loader.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>

#include "host_api/error.h"
#include "registry/plugin_files.h"
#include "registry/plugin_library.h"
#include "registry/plugin_probe.h"
#include "support/sha256.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;

// Collects what a plugin registers; nothing reaches the real registry until every check has passed.
class StagingRegistrar : public Registrar {
 public:
  struct Staged {
    EngineFactory factory;
    EngineTraits traits;
  };
  void register_engine(const EngineKey& key, EngineFactory factory, EngineTraits traits) override {
    if (!factories_.emplace(key, Staged{std::move(factory), std::move(traits)}).second) repeated_.push_back(key.str());
  }
  std::map<EngineKey, Staged>& factories() { return factories_; }
  const std::vector<std::string>& repeated() const { return repeated_; }

 private:
  std::map<EngineKey, Staged> factories_;
  std::vector<std::string> repeated_;
};

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

struct Candidate {
  fs::path manifest;
  std::vector<size_t> dirs;  // indices into the search path of every directory that reached this manifest
};

// "--plugin-dir /x" or "plugins.dirs (run.toml:3:8) /x": how the user named the directory.
std::string named(const PluginSearchDir& dir) { return dir.source + " " + dir.path.string(); }

// Why a required directory gave no plugin: what it held and why each was turned away.
std::string nothing_loaded_from(const PluginSearchDir& dir, const std::vector<RejectedPlugin>& rejected_here) {
  if (rejected_here.empty()) {
    return named(dir) + " holds no plugin (no " + std::string(kManifestFileName) +
           " in it or in any directory directly below it)";
  }
  std::string what = named(dir) + " holds no plugin that loads:";
  for (const auto& r : rejected_here) what += " " + r.path.string() + ": " + r.reason + ";";
  what.pop_back();
  return what;
}

// The plugin directories under one search directory, in a stable (sorted) order.
std::vector<fs::path> plugin_dirs_in(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kManifestFileName, ec)) return {dir};
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec) && fs::exists(entry.path() / kManifestFileName, ec)) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool unverified_plugins_allowed() {
  const char* value = std::getenv(kAllowUnverifiedPluginsEnv);
  return value && std::string(value) == "1";
}

// True when the library's digest equals the manifest's. A manifest without one is refused unless the development
// escape hatch is set (then false: the caller warns); a wrong digest is refused always, since it is a claim that
// does not hold.
bool verify_sha256(const PluginManifest& manifest, const fs::path& library) {
  if (!manifest.sha256) {
    if (unverified_plugins_allowed()) return false;
    throw EngineryError("the manifest has no sha256 for " + library.filename().string() +
                            ", so the library cannot be verified and the plugin is refused",
                        manifest.file.string(),
                        "sha256 = \"<64 hex digits>\" (enginery_add_plugin fills in @ENGINERY_PLUGIN_SHA256@); " +
                            std::string(kAllowUnverifiedPluginsEnv) + "=1 loads it unverified, for development only");
  }
  std::string actual = sha256_file_hex(library);
  if (actual != *manifest.sha256) {
    throw EngineryError("sha256 mismatch for " + library.string() + ": the file's is " + actual +
                            ", the manifest says " + *manifest.sha256,
                        manifest.sha256_where, actual);
  }
  return true;
}

struct CheckedLibrary {
  fs::path path;  // resolved
  bool verified;  // false: no sha256, admitted by the development escape hatch
};

// The file checks, before any of the library's code runs anywhere: inside the plugin directory, owned by the user or
// root and writable by nobody else (its directories too), and the digest the manifest gives.
CheckedLibrary checked_library(const PluginManifest& manifest) {
  fs::path library = resolve_inside(manifest.directory(), manifest.library, manifest.library_where);
  std::error_code ec;
  if (library.parent_path() != fs::canonical(manifest.directory(), ec)) {
    check_trusted_directory_chain(library.parent_path(), "plugin library's directory");
  }
  check_trusted(library, "plugin library");
  return {library, verify_sha256(manifest, library)};
}

// The engines the library registered must be exactly those its manifest declares.
void check_registered_as_declared(const PluginManifest& manifest, StagingRegistrar& staging, const std::string& where) {
  std::vector<std::string> declared_only, registered_only, declared;
  for (const auto& engine : manifest.engines) {
    declared.push_back(engine.key.str());
    if (!staging.factories().count(engine.key)) declared_only.push_back(engine.key.str());
  }
  for (const auto& [key, factory] : staging.factories()) {
    bool is_declared = std::any_of(manifest.engines.begin(), manifest.engines.end(),
                                   [&](const ManifestEngine& e) { return e.key == key; });
    if (!is_declared) registered_only.push_back(key.str());
  }
  if (!declared_only.empty() || !registered_only.empty()) {
    std::string what = "the engines the library registers differ from those its manifest declares:";
    if (!declared_only.empty()) what += " declared but not registered: " + join(declared_only) + ";";
    if (!registered_only.empty()) what += " registered but not declared: " + join(registered_only) + ";";
    what.pop_back();
    throw EngineryError(what, where, join(declared));
  }
}

// Every check of docs/ARCHITECTURE.md, "Plugins and packaging" for one manifest that already parsed. Throws
// EngineryError; on success the plugin's engines are in `registry`, all of them.
LoadedPlugin load_one(const PluginManifest& manifest, EngineRegistry& registry) {
  const std::string who = "plugin '" + manifest.name + "'";
  const std::string where = who + " (" + manifest.file.string() + ")";
  check_contract_version(manifest.api_version, manifest.api_version_where, who);
  for (const auto& engine : manifest.engines) {
    if (const EngineOrigin* taken = registry.origin(engine.key)) {
      throw EngineryError("engine " + engine.key.str() + " declared by " + where + " is already registered by " +
                              taken->str(),
                          engine.where, "one plugin per (model_type, backend, device)");
    }
  }

  const CheckedLibrary library = checked_library(manifest);
  // A plugin that crashes while loading or registering takes down only the probe's process.
  probe_plugin(manifest, library.path, where);
  OpenedLibrary opened = open_plugin_library(library.path, where);
  check_plugin_info(*opened.info, manifest);

  const std::string in_library = who + " (" + library.path.string() + ")";
  StagingRegistrar staging;
  try {
    opened.info->register_engines(staging);
  } catch (const std::exception& e) {
    throw EngineryError(std::string("register_engines threw: ") + e.what(), in_library);
  } catch (...) {
    throw EngineryError("register_engines threw a non-standard exception", in_library);
  }
  if (!staging.repeated().empty()) {
    throw EngineryError("registered more than once: " + join(staging.repeated()), in_library);
  }
  check_registered_as_declared(manifest, staging, where);

  std::vector<EngineRegistration> registrations;
  for (auto& [key, staged] : staging.factories()) {
    registrations.push_back({key, std::move(staged.factory), EngineOrigin{manifest.name, manifest.file.string()},
                             opened.handle, std::move(staged.traits)});
  }
  registry.register_all(std::move(registrations));
  if (!library.verified) {
    // Loud on purpose: one line per plugin, on every run, whatever the caller prints.
    std::cerr << "warning: plugin '" << manifest.name << "' (" << manifest.file.string() << ") loaded WITHOUT sha256 "
              << "verification of " << library.path.string() << ", because " << kAllowUnverifiedPluginsEnv
              << "=1: for development only" << std::endl;
  }
  return LoadedPlugin{manifest, library.path, library.verified};
}

// `later` not loaded because `loaded`, of the same name, came first from `loaded_dir`.
ShadowedPlugin shadowed_by(const PluginManifest& later, const PluginManifest& loaded, const PluginSearchDir& loaded_dir) {
  const bool digests_known = later.sha256 && loaded.sha256;
  std::string which;
  if (digests_known && *later.sha256 == *loaded.sha256) {
    which = "the same plugin (same sha256)";
  } else {
    which = std::string(digests_known ? "another" : "a") + " plugin of that name (version " + loaded.version +
            (digests_known ? ", another library)" : ")");
  }
  return {later.file, later.name, loaded.file,
          "plugin '" + later.name + "' (" + later.file.string() + ") not loaded: " + which + " was loaded from " +
              loaded.file.string() + ", earlier on the search path (" + loaded_dir.source + ")"};
}

}  // namespace

PluginLoader::PluginLoader(std::vector<PluginSearchDir> search_path) : search_path_(std::move(search_path)) {}

std::vector<PluginSearchDir> PluginLoader::search_path(const std::vector<fs::path>& dirs, const std::string& dirs_source,
                                                       const char* env_plugin_path, const fs::path& install_default) {
  std::vector<PluginSearchDir> out;
  for (const auto& dir : dirs) out.push_back({dir, dirs_source, true});
  if (env_plugin_path) {
    std::string value = env_plugin_path;
    size_t start = 0;
    while (start <= value.size()) {
      size_t end = value.find(':', start);
      if (end == std::string::npos) end = value.size();
      if (end > start) out.push_back({value.substr(start, end - start), kPluginPathEnv, true});
      start = end + 1;
    }
  }
  if (!install_default.empty()) out.push_back({install_default, "install default", false});
  return out;
}

PluginLoadReport PluginLoader::load(EngineRegistry& registry) const {
  PluginLoadReport report;
  report.searched = search_path_;

  // Find every manifest; the same plugin directory reached twice is loaded once.
  std::vector<Candidate> candidates;
  std::map<fs::path, size_t> seen;  // a manifest's identity -> its index in candidates
  std::vector<bool> unusable(search_path_.size(), false);
  for (size_t d = 0; d < search_path_.size(); ++d) {
    const PluginSearchDir& dir = search_path_[d];
    std::error_code ec;
    if (!fs::exists(dir.path, ec)) {
      if (dir.required) {
        report.unusable_dirs.push_back({dir, named(dir) + " does not exist"});
        unusable[d] = true;
      } else if (dir.must_exist) {
        report.rejected.push_back({dir.path, "", "plugin directory does not exist (from " + dir.source + ")"});
      }
      continue;
    }
    if (!fs::is_directory(dir.path, ec)) {
      if (dir.required) {
        report.unusable_dirs.push_back({dir, named(dir) + " is not a directory"});
        unusable[d] = true;
      } else {
        report.rejected.push_back({dir.path, "", "not a directory (from " + dir.source + ")"});
      }
      continue;
    }
    for (const auto& plugin_dir : plugin_dirs_in(dir.path)) {
      fs::path manifest = fs::absolute(plugin_dir / kManifestFileName).lexically_normal();
      fs::path identity = fs::weakly_canonical(manifest, ec);
      auto [it, inserted] = seen.emplace(ec ? manifest : identity, candidates.size());
      if (inserted) candidates.push_back({manifest, {}});
      candidates[it->second].dirs.push_back(d);
    }
  }

  // Read every manifest before any library is opened.
  std::vector<PluginManifest> manifests;
  std::vector<const Candidate*> manifest_candidates;  // parallel to manifests
  std::vector<std::vector<RejectedPlugin>> rejected_in(search_path_.size());
  auto reject = [&](const Candidate& candidate, RejectedPlugin r) {
    for (size_t d : candidate.dirs) rejected_in[d].push_back(r);
    report.rejected.push_back(std::move(r));
  };
  for (const auto& candidate : candidates) {
    try {
      check_trusted_directory_chain(candidate.manifest.parent_path(), "plugin directory");
      check_trusted(candidate.manifest, "plugin manifest");
      manifests.push_back(parse_manifest(candidate.manifest));
      manifest_candidates.push_back(&candidate);
    } catch (const std::exception& e) {
      reject(candidate, {candidate.manifest, "", e.what()});
    }
  }

  // A name belongs to the first plugin on the search path that loads under it: one that fails a check claims
  // nothing, and a later one of a name already loaded is shadowed, its library never opened.
  std::map<std::string, size_t> loaded_names;  // a loaded plugin's name -> its index in manifests
  std::vector<size_t> loaded_from(search_path_.size(), 0);
  for (size_t m = 0; m < manifests.size(); ++m) {
    const Candidate& candidate = *manifest_candidates[m];
    auto taken = loaded_names.find(manifests[m].name);
    if (taken != loaded_names.end()) {
      const size_t winner = taken->second;
      report.shadowed.push_back(
          shadowed_by(manifests[m], manifests[winner], search_path_[manifest_candidates[winner]->dirs.front()]));
      // Its directory offers a plugin that is in use: what a directory the user named must do.
      for (size_t d : candidate.dirs) ++loaded_from[d];
      continue;
    }
    try {
      report.loaded.push_back(load_one(manifests[m], registry));
      loaded_names.emplace(manifests[m].name, m);
      for (size_t d : candidate.dirs) ++loaded_from[d];
    } catch (const std::exception& e) {
      reject(candidate, {manifests[m].file, manifests[m].name, e.what()});
    }
  }
  for (size_t d = 0; d < search_path_.size(); ++d) {
    if (search_path_[d].required && !unusable[d] && loaded_from[d] == 0) {
      report.unusable_dirs.push_back({search_path_[d], nothing_loaded_from(search_path_[d], rejected_in[d])});
    }
  }
  return report;
}

void check_required_dirs(const PluginLoadReport& report) {
  if (report.unusable_dirs.empty()) return;
  std::string what = report.unusable_dirs.front().message;
  for (size_t i = 1; i < report.unusable_dirs.size(); ++i) what += "; and " + report.unusable_dirs[i].message;
  throw EngineryError(what, "",
                      "an existing directory holding a plugin (<dir>/" + std::string(kManifestFileName) +
                          " or <dir>/<plugin>/" + std::string(kManifestFileName) + ") that loads");
}

}  // namespace enginery
