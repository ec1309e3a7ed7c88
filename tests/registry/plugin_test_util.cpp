#include "tests/registry/plugin_test_util.h"

#include <stdlib.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <stdexcept>
#include "support/torch_compat.h"  // compat::remove_all

namespace enginery::test {

fs::path built_plugin_library(const std::string& target) {
  return fs::path(ENGINERY_TEST_PLUGIN_DIR) / target / ("lib" + target + ".so");
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/enginery-registry-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  enginery::compat::remove_all(path_, ec);
}

std::string rendered_sha256(const std::string& target) {
  std::ifstream in(fs::path(ENGINERY_TEST_PLUGIN_DIR) / target / "plugin.toml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::smatch match;
  if (!std::regex_search(text, match, std::regex("sha256 = \"([0-9a-f]{64})\""))) {
    throw std::runtime_error("no sha256 in the rendered manifest of " + target);
  }
  return match[1];
}

ManifestSpec spec_for(const std::string& target, const std::string& backend) {
  return {target, "lib" + target + ".so", {{"language_model", backend, "cpu"}, {"value_model", backend, "cpu"}},
          std::to_string(kContractVersion),
          "sha256 = \"" + rendered_sha256(target) + "\"\n"};
}

std::string manifest_text(const ManifestSpec& spec) {
  std::string text = "name = \"" + spec.name + "\"\nversion = \"0.0.1\"\napi_version = \"" +
                     spec.api_version + "\"\nlibrary = \"" + spec.library + "\"\n" + spec.extra;
  for (const auto& key : spec.engines) {
    text += "\n[[engines]]\nmodel_type = \"" + key.model_type + "\"\nbackend = \"" + key.backend +
            "\"\ndevice = \"" + key.device + "\"\n";
  }
  return text;
}

void write_file(const fs::path& file, const std::string& text, fs::perms perms) {
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + file.string());
  }
  fs::permissions(file, perms);
}

fs::path make_dir(const fs::path& dir) {
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(0755));
  return dir;
}

fs::path make_plugin(const fs::path& parent, const std::string& dir_name, const std::string& target,
                     const std::string& manifest) {
  fs::path dir = make_dir(parent / dir_name);
  if (!target.empty()) {
    fs::path copy = dir / built_plugin_library(target).filename();
    fs::copy_file(built_plugin_library(target), copy, fs::copy_options::overwrite_existing);
    fs::permissions(copy, fs::perms(0755));
  }
  write_file(dir / "plugin.toml", manifest);
  return dir;
}

}  // namespace enginery::test
