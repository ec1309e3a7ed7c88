// Target of plugin.toml parsing (registry/manifest.cpp), seeded with the manifests of this tree rendered as the
// build renders them (cmake/EngineryPlugin.cmake).
#include <algorithm>

#include "registry/manifest.h"
#include "tests/fuzz/targets.h"

namespace enginery {
namespace fuzz {
namespace {

// The entry point under test; the path only names the file in messages and anchors library_path().
PluginManifest parse_manifest_input(const std::string& text) {
  return parse_manifest_text(text, scratch_dir() / "plugins" / "fuzzed" / "plugin.toml");
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

std::string rendered(const std::string& relative) {
  std::string text = read_file(source_dir() / relative);
  text = replace_all(text, "@ENGINERY_PLUGIN_LIBRARY@", "libenginery_fuzzed.so");
  text = replace_all(text, "@ENGINERY_PLUGIN_SHA256@", std::string(64, 'a'));
  return replace_all(text, "@ENGINERY_PLUGIN_NAME@", "enginery_fuzzed");
}

}  // namespace

namespace manifest {
void fuzz_one(const std::string& input) {
  const PluginManifest m = parse_manifest_input(input);
  // What the loader relies on once parsing succeeded (registry/plugin_loader.cpp opens library_path()).
  if (m.engines.empty()) throw Finding("a manifest without engines was accepted");
  const std::filesystem::path library = m.library_path().lexically_normal();
  const std::filesystem::path dir = m.directory().lexically_normal();
  const auto [dir_end, unused] = std::mismatch(dir.begin(), dir.end(), library.begin(), library.end());
  if (dir_end != dir.end()) throw Finding("library '" + m.library + "' resolves outside the manifest's directory");
}
}  // namespace manifest

Target manifest_target() {
  Target t;
  t.name = "manifest";
  t.syntax = Syntax::kToml;
  t.fuzz_one = manifest::fuzz_one;
  t.seeds = [] {
    return std::vector<std::string>{rendered("plugin.toml"), rendered("tests/registry/alpha.toml.in"),
                                    rendered("examples/plugin/plugin.toml.in")};
  };
  t.dictionary = {"name", "version", "api_version", "library", "sha256", "[[engines]]\n", "model_type", "backend",
                  "device", "\"3\"", "\"2.6\"", "manifest_version", "capabilities"};
  return t;
}

}  // namespace fuzz
}  // namespace enginery
