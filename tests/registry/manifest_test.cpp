#include <gtest/gtest.h>

#include "host_api/error.h"
#include "host_api/version.h"
#include "registry/manifest.h"

namespace enginery::test {
namespace {

const char* const kGood = R"(manifest_version = 1
name = "enginery_fsdp"
version = "0.1.0"
api_version = "2.0"
library = "lib/libenginery_fsdp.so"
sha256 = "ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789"
capabilities = ["precision-cpu-fp16", "checkpoint-same-world"]

[[engines]]
model_type = "language_model"
backend = "fsdp"
device = "cpu"
capabilities = ["hsdp", "precision-cpu-fp16"]

[[engines]]
model_type = "value_model"
backend = "fsdp2"
device = "cuda"
)";

std::string error_of(const std::string& text) {
  try {
    parse_manifest_text(text, "/p/plugin.toml");
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "(parsed)";
}

std::string with(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(Manifest, ParsesEveryField) {
  PluginManifest m = parse_manifest_text(kGood, "/p/plugin.toml");
  EXPECT_EQ(m.manifest_version, kManifestVersion);
  EXPECT_EQ(m.name, "enginery_fsdp");
  EXPECT_EQ(m.version, "0.1.0");
  EXPECT_EQ(m.api_major, 2);
  EXPECT_EQ(m.api_minor, 0);
  EXPECT_EQ(m.library_path(), "/p/lib/libenginery_fsdp.so");
  EXPECT_EQ(*m.sha256, "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
  EXPECT_EQ(m.sha256_where, "/p/plugin.toml:6:10");
  ASSERT_EQ(m.engines.size(), 2u);
  EXPECT_EQ(m.engines[0].key, (EngineKey{"language_model", "fsdp", "cpu"}));
  EXPECT_EQ(m.engines[0].capabilities, (std::vector<std::string>{"checkpoint-same-world", "hsdp", "precision-cpu-fp16"}));
  EXPECT_EQ(m.engines[1].key, (EngineKey{"value_model", "fsdp2", "cuda"}));
  EXPECT_EQ(m.engines[1].capabilities, (std::vector<std::string>{"checkpoint-same-world", "precision-cpu-fp16"}));
  EXPECT_EQ(m.engines[1].where, "/p/plugin.toml:15:1");
}

TEST(Manifest, ErrorsNameFileLineColumn) {
  EXPECT_EQ(error_of(with(kGood, "backend = \"fsdp2\"", "backend = 2")),
            "/p/plugin.toml:17:11: field 'backend' must be a string, got integer in [[engines]] #2");
  EXPECT_EQ(error_of(with(kGood, "device = \"cpu\"", "device = \"cpu\"\nflavour = 1")),
            "/p/plugin.toml:13:1: unknown key 'flavour' in [[engines]] #1 (allowed: model_type, backend, device, "
            "capabilities)");
  EXPECT_EQ(error_of(with(kGood, "backend = \"fsdp2\"\n", "")),
            "/p/plugin.toml:15:1: missing required field 'backend' in [[engines]] #2");
  EXPECT_EQ(error_of(with(kGood, "manifest_version = 1", "manifest_version = 2")),
            "/p/plugin.toml:1:20: unsupported manifest_version 2 (allowed: 1)");
  EXPECT_EQ(error_of(with(kGood, "api_version = \"2.0\"", "api_version = \"one\"")).substr(0, 47),
            "/p/plugin.toml:4:15: field 'api_version' is 'on");
  EXPECT_EQ(error_of(with(kGood, "capabilities = [\"precision-cpu-fp16\", \"checkpoint-same-world\"]",
                          "capabilities = [\"precision-cpu-fp16\", 3]")),
            "/p/plugin.toml:7:39: field 'capabilities' must be an array of strings, got integer");
  // A misspelt capability would make the conformance suite skip silently: refused where it is written.
  const std::string typo = error_of(with(kGood, "capabilities = [\"hsdp\",", "capabilities = [\"multirank\","));
  EXPECT_EQ(typo.rfind("/p/plugin.toml:13:16: unknown capability 'multirank' (allowed: checkpoint-same-world", 0), 0u)
      << typo;
  EXPECT_EQ(error_of(with(kGood, "library = \"lib/libenginery_fsdp.so\"", "library = \"\"")),
            "/p/plugin.toml:5:11: field 'library' is empty (allowed: the plugin library's file name, relative to the "
            "manifest)");
  std::string malformed = error_of(with(kGood, "version = \"0.1.0\"", "version = \"0.1.0"));
  EXPECT_EQ(malformed.rfind("/p/plugin.toml:3:", 0), 0u) << malformed;
  EXPECT_NE(malformed.find("malformed TOML"), std::string::npos);
}

TEST(Manifest, RejectsLibrariesOutsideItsDirectory) {
  for (const char* library : {"/usr/lib/libx.so", "../libx.so", "sub/../../libx.so", ""}) {
    std::string message = error_of(with(kGood, "lib/libenginery_fsdp.so", library));
    EXPECT_EQ(message.rfind("/p/plugin.toml:5:11: field 'library'", 0), 0u) << message;
  }
}

TEST(Manifest, RejectsBadValues) {
  EXPECT_NE(error_of(with(kGood, "ABCDEF0123", "XYZ")).find("field 'sha256'"), std::string::npos);
  EXPECT_NE(error_of(with(kGood, "name = \"enginery_fsdp\"", "name = \"a b\"")).find("field 'name' is 'a b'"),
            std::string::npos);
  std::string no_engines = kGood;
  no_engines = no_engines.substr(0, no_engines.find("[[engines]]")) + "engines = []\n";
  EXPECT_NE(error_of(no_engines).find("declares no engine"), std::string::npos) << error_of(no_engines);
  std::string twice = std::string(kGood) + "\n[[engines]]\nmodel_type = \"value_model\"\nbackend = \"fsdp2\"\n"
                                           "device = \"cuda\"\n";
  EXPECT_EQ(error_of(twice), "/p/plugin.toml:20:1: engine (value_model, fsdp2, cuda) is declared twice");
}

}  // namespace
}  // namespace enginery::test
