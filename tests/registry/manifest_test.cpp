#include <gtest/gtest.h>

#include "host_api/error.h"
#include "host_api/version.h"
#include "registry/manifest.h"

namespace enginery::test {
namespace {

const char* const kGood = R"(name = "enginery_fsdp"
version = "0.1.0"
api_version = "3"
library = "lib/libenginery_fsdp.so"
sha256 = "ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789"

[[engines]]
model_type = "language_model"
backend = "fsdp"
device = "cpu"

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
  EXPECT_EQ(m.name, "enginery_fsdp");
  EXPECT_EQ(m.version, "0.1.0");
  EXPECT_EQ(m.api_version, kContractVersion);
  EXPECT_EQ(m.api_version_where, "/p/plugin.toml:3:15");
  EXPECT_EQ(m.library_path(), "/p/lib/libenginery_fsdp.so");
  EXPECT_EQ(*m.sha256, "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
  EXPECT_EQ(m.sha256_where, "/p/plugin.toml:5:10");
  ASSERT_EQ(m.engines.size(), 2u);
  EXPECT_EQ(m.engines[0].key, (EngineKey{"language_model", "fsdp", "cpu"}));
  EXPECT_EQ(m.engines[1].key, (EngineKey{"value_model", "fsdp2", "cuda"}));
  EXPECT_EQ(m.engines[1].where, "/p/plugin.toml:12:1");
}

TEST(Manifest, ErrorsNameFileLineColumn) {
  EXPECT_EQ(error_of(with(kGood, "backend = \"fsdp2\"", "backend = 2")),
            "/p/plugin.toml:14:11: field 'backend' must be a string, got integer in [[engines]] #2");
  EXPECT_EQ(error_of(with(kGood, "device = \"cpu\"", "device = \"cpu\"\nflavour = 1")),
            "/p/plugin.toml:11:1: unknown key 'flavour' in [[engines]] #1 (allowed: model_type, backend, device)");
  EXPECT_EQ(error_of(with(kGood, "backend = \"fsdp2\"\n", "")),
            "/p/plugin.toml:12:1: missing required field 'backend' in [[engines]] #2");
  EXPECT_EQ(error_of(with(kGood, "api_version = \"3\"", "api_version = \"one\"")),
            "/p/plugin.toml:3:15: field 'api_version' is 'one' (allowed: \"3\", the contract version)");
  EXPECT_EQ(error_of(with(kGood, "api_version = \"3\"", "api_version = 3")),
            "/p/plugin.toml:3:15: field 'api_version' must be a string, got integer");
  EXPECT_EQ(error_of(with(kGood, "library = \"lib/libenginery_fsdp.so\"", "library = \"\"")),
            "/p/plugin.toml:4:11: field 'library' is empty (allowed: the plugin library's file name, relative to the "
            "manifest)");
  std::string malformed = error_of(with(kGood, "version = \"0.1.0\"", "version = \"0.1.0"));
  EXPECT_EQ(malformed.rfind("/p/plugin.toml:2:", 0), 0u) << malformed;
  EXPECT_NE(malformed.find("malformed TOML"), std::string::npos);
}

// A 2.x manifest is refused where it says so, with what to do (docs/PLUGIN_GUIDE.md, "Migrating from 2.x"): its
// api_version, its manifest_version, and the capabilities that engines now declare at registration.
TEST(Manifest, A2xManifestIsRefusedByNameWithTheMigration) {
  const std::string old_version = error_of(with(kGood, "api_version = \"3\"", "api_version = \"2.6\""));
  EXPECT_EQ(old_version.rfind("/p/plugin.toml:3:15: api_version \"2.6\" is a 2.x plugin; this host implements "
                              "contract 3: rebuild the plugin",
                              0),
            0u)
      << old_version;
  EXPECT_NE(old_version.find("docs/PLUGIN_GUIDE.md, \"Migrating from 2.x\""), std::string::npos) << old_version;
  const std::string version_line = error_of("manifest_version = 1\n" + std::string(kGood));
  EXPECT_EQ(version_line.rfind("/p/plugin.toml:1:20: 'manifest_version' is a 2.x field", 0), 0u) << version_line;
  const std::string top = error_of(with(kGood, "sha256 =", "capabilities = [\"multi-rank\"]\nsha256 ="));
  EXPECT_EQ(top.rfind("/p/plugin.toml:5:16: 'capabilities' is a 2.x field", 0), 0u) << top;
  const std::string engine = error_of(with(kGood, "device = \"cpu\"", "device = \"cpu\"\ncapabilities = [\"hsdp\"]"));
  EXPECT_EQ(engine.rfind("/p/plugin.toml:11:16: 'capabilities' is a 2.x field", 0), 0u) << engine;
  EXPECT_NE(engine.find("Migrating from 2.x"), std::string::npos) << engine;
}

TEST(Manifest, RejectsLibrariesOutsideItsDirectory) {
  for (const char* library : {"/usr/lib/libx.so", "../libx.so", "sub/../../libx.so", ""}) {
    std::string message = error_of(with(kGood, "lib/libenginery_fsdp.so", library));
    EXPECT_EQ(message.rfind("/p/plugin.toml:4:11: field 'library'", 0), 0u) << message;
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
  EXPECT_EQ(error_of(twice), "/p/plugin.toml:17:1: engine (value_model, fsdp2, cuda) is declared twice");
}

}  // namespace
}  // namespace enginery::test
