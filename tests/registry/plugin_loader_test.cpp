// PluginLoader against real test plugins (tests/registry/CMakeLists.txt). Every bad plugin case checks the same
// three things: it is rejected with a reason naming the problem, the registry is exactly what it was plus the good
// plugin beside it, and that good plugin still loaded.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "host_api/error.h"
#include "registry/plugin_library.h"
#include "registry/plugin_loader.h"
#include "registry/plugin_probe.h"
#include "support/sha256.h"
#include "tests/registry/fake_engine.h"
#include "tests/registry/plugin_test_util.h"

namespace enginery::test {
namespace {

std::vector<std::string> snapshot(const EngineRegistry& registry) {
  std::vector<std::string> out;
  for (const auto& info : registry.list()) {
    out.push_back(info.key.str() + " | " + info.origin.plugin + " | " + info.origin.manifest);
  }
  return out;
}

// Something registered before any plugin, so "as before" is not trivially "empty".
void register_builtin(EngineRegistry& registry) {
  registry.register_engine({{"language_model", "builtin", "cpu"},
                            [](const EngineArgs& args) { return std::make_shared<FakeEngine>(args, 0); },
                            {"test-builtin", ""},
                            {},
                            {}});
}

std::string good_alpha_manifest() { return manifest_text(spec_for("tp_alpha", "alpha")); }

std::string sha256_line(const std::string& digest) { return "sha256 = \"" + digest + "\"\n"; }

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("test bug: '" + from + "' not in text");
  return text.replace(at, from.size(), to);
}

struct BadCase {
  std::string label;
  std::string dir_name;  // sorted before the good plugin ("a_...") unless it must come after it ("z_...")
  std::function<void(const fs::path& plugin_dir_parent, const fs::path& good_dir)> make;
  std::vector<std::string> reason_contains;
  bool opens_library;  // whether the loader should get as far as dlopen for the bad plugin
  bool needs_root = false;  // chown to another user: skipped when the tests do not run as root
};

void make_beta(const fs::path& parent, const std::string& dir, const std::string& manifest) {
  make_plugin(parent, dir, "tp_beta", manifest);
}
std::string beta_manifest() { return manifest_text(spec_for("tp_beta", "beta")); }

constexpr uid_t kNobody = 65534;

void chown_to_nobody(const fs::path& path) {
  if (::chown(path.c_str(), kNobody, kNobody) != 0) throw std::runtime_error("chown failed for " + path.string());
}

std::vector<BadCase> bad_cases() {
  const std::string a = "a_bad";
  std::vector<BadCase> cases = {
      {"malformed_toml", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, replace(beta_manifest(), "name = \"tp_beta\"", "name = \"tp_beta"));
       },
       {"a_bad/plugin.toml:1:", "malformed TOML"}, false},
      {"missing_field", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, replace(beta_manifest(), "library = \"libtp_beta.so\"\n", ""));
       },
       {"a_bad/plugin.toml:1:1: missing required field 'library'"}, false},
      {"wrong_type", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, replace(beta_manifest(), "version = \"0.0.1\"", "version = 3"));
       },
       {"a_bad/plugin.toml:2:11: field 'version' must be a string, got integer"}, false},
      {"unknown_key", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.extra = "colour = \"red\"\n";
         make_beta(p, a, manifest_text(spec));
       },
       {"a_bad/plugin.toml:5:1: unknown key 'colour'", "allowed: name, version"}, false},
      {"library_missing", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.library = "libnothere.so";
         make_plugin(p, a, "", manifest_text(spec));
       },
       {"library 'libnothere.so' does not exist"}, false},
      {"not_a_shared_library", a,
       [a](const fs::path& p, const fs::path&) {
         // Longer than an ELF header, so the loader reads it and finds no ELF magic.
         const std::string text = std::string(200, '#') + "\nthis is not an ELF file\n";
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.library = "libtext.so";
         spec.extra = sha256_line(sha256_hex(text));
         fs::path dir = make_plugin(p, a, "", manifest_text(spec));
         write_file(dir / "libtext.so", text, fs::perms(0755));
       },
       // dlerror()'s words, not a stale errno ("Bad file descriptor").
       {"cannot load", "libtext.so: invalid ELF header"}, false},
      {"entry_point_missing", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_no_entry", manifest_text(spec_for("tp_no_entry", "none")));
       },
       {"has no entry point 'enginery_plugin_info'"}, true},
      {"contract_newer_in_library", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_contract_next", manifest_text(spec_for("tp_contract_next", "next")));
       },
       {"the library was built against contract " + std::to_string(kContractVersion + 1),
        "this host is older than the plugin"},
       true},
      {"contract_newer_in_manifest", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.api_version = std::to_string(kContractVersion + 1);
         make_beta(p, a, manifest_text(spec));
       },
       {"a_bad/plugin.toml:3:15: plugin 'tp_beta' was built against contract " + std::to_string(kContractVersion + 1)},
       false},
      // A 2.x manifest is refused before its library is opened; a 2.x library whose manifest says 3 when opened.
      {"manifest_2x", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.api_version = "2.6";
         make_beta(p, a, manifest_text(spec));
       },
       {"a_bad/plugin.toml:3:15: api_version \"2.6\" is a 2.x plugin", "Migrating from 2.x"}, false},
      {"library_2x", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_contract_2", manifest_text(spec_for("tp_contract_2", "old")));
       },
       {"the library was built against contract 2", "a 2.x plugin; rebuild it against enginery's contract 3",
        "Migrating from 2.x"},
       true},
      {"header_fingerprint_mismatch", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_fingerprint", manifest_text(spec_for("tp_fingerprint", "fp")));
       },
       {"built against other enginery headers (fingerprint 0000000000000000", "rebuild it against this installation"},
       true},
      {"torch_version_mismatch", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_torch_version", manifest_text(spec_for("tp_torch_version", "tv")));
       },
       {"LibTorch version mismatch: the plugin was built with 0.0.0, the host with " + host_torch_version()}, true},
      {"cxx11_abi_mismatch", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_cxx11_abi", manifest_text(spec_for("tp_cxx11_abi", "abi")));
       },
       {"C++ ABI mismatch: the plugin was built with _GLIBCXX_USE_CXX11_ABI=" +
        std::to_string(1 - host_cxx11_abi())},
       true},
      {"sha256_mismatch", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.extra = sha256_line(std::string(64, '0'));
         make_beta(p, a, manifest_text(spec));
       },
       {"sha256 mismatch", "the manifest says " + std::string(64, '0')}, false},
      {"sha256_missing", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.extra = "";
         make_beta(p, a, manifest_text(spec));
       },
       {"a_bad/plugin.toml: the manifest has no sha256 for libtp_beta.so", "plugin is refused",
        "ENGINERY_ALLOW_UNVERIFIED_PLUGINS=1 loads it unverified"},
       false},
      {"declared_but_not_registered", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.engines.push_back({"language_model", "beta", "cuda"});
         make_beta(p, a, manifest_text(spec));
       },
       {"declared but not registered: (language_model, beta, cuda)"}, true},
      {"registered_but_not_declared", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.engines.pop_back();
         make_beta(p, a, manifest_text(spec));
       },
       {"registered but not declared: (value_model, beta, cpu)"}, true},
      {"duplicate_backend_across_plugins", "z_dup",
       [](const fs::path& p, const fs::path&) {
         make_plugin(p, "z_dup", "tp_dup", manifest_text(spec_for("tp_dup", "alpha")));
       },
       {"engine (language_model, alpha, cpu) declared by plugin 'tp_dup' (", "z_dup/plugin.toml",
        "is already registered by plugin 'tp_alpha' (", "m_alpha/plugin.toml"},
       false},
      {"library_escapes_with_dotdot", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_alpha", "alpha");
         spec.name = "escaper";
         spec.library = "../m_alpha/libtp_alpha.so";
         make_plugin(p, a, "", manifest_text(spec));
       },
       {"a_bad/plugin.toml:4:11: field 'library' is '../m_alpha/libtp_alpha.so', which is outside"}, false},
      {"library_escapes_by_absolute_path", a,
       [a](const fs::path& p, const fs::path& good) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.library = (good / "libtp_alpha.so").string();
         make_plugin(p, a, "", manifest_text(spec));
       },
       {"which is outside the manifest's directory"}, false},
      {"library_escapes_by_symlink", a,
       [a](const fs::path& p, const fs::path& good) {
         fs::path dir = make_plugin(p, a, "", beta_manifest());
         fs::create_symlink(good / "libtp_alpha.so", dir / "libtp_beta.so");
       },
       {"outside the plugin directory"}, false},
      {"world_writable_library", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         fs::permissions(p / a / "libtp_beta.so", fs::perms(0757));
       },
       {"plugin library is writable by anyone (mode 0757)"}, false},
      {"world_writable_directory", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         fs::permissions(p / a, fs::perms(0777));
       },
       {"plugin directory is writable by anyone (mode 0777)"}, false},
      {"group_writable_library", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         fs::permissions(p / a / "libtp_beta.so", fs::perms(0775));
       },
       {"a_bad/libtp_beta.so: plugin library is writable by its group (mode 0775)"}, false},
      {"world_writable_library_subdirectory", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.library = "lib/libtp_beta.so";
         fs::path dir = make_plugin(p, a, "", manifest_text(spec));
         make_dir(dir / "lib");
         fs::copy_file(built_plugin_library("tp_beta"), dir / "lib" / "libtp_beta.so");
         fs::permissions(dir / "lib" / "libtp_beta.so", fs::perms(0755));
         fs::permissions(dir / "lib", fs::perms(0777));
       },
       {"a_bad/lib: plugin library's directory is writable by anyone (mode 0777)"}, false},
      {"library_owned_by_another_user", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         chown_to_nobody(p / a / "libtp_beta.so");
       },
       {"a_bad/libtp_beta.so: plugin library is owned by uid 65534", "neither the invoking user nor root"}, false,
       true},
      {"manifest_owned_by_another_user", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         chown_to_nobody(p / a / "plugin.toml");
       },
       {"a_bad/plugin.toml: plugin manifest is owned by uid 65534"}, false, true},
      {"plugin_directory_owned_by_another_user", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         chown_to_nobody(p / a);
       },
       {"a_bad: plugin directory is owned by uid 65534"}, false, true},
      {"manifest_is_a_fifo", a,
       [a](const fs::path& p, const fs::path&) {
         fs::path dir = make_plugin(p, a, "tp_beta", beta_manifest());
         fs::remove(dir / "plugin.toml");
         if (mkfifo((dir / "plugin.toml").c_str(), 0644) != 0) throw std::runtime_error("mkfifo failed");
       },
       {"a_bad/plugin.toml: cannot read plugin manifest: it is a FIFO, not a regular file", "allowed: a regular file"}, false},
      {"segfaults_while_registering", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_segv", manifest_text(spec_for("tp_segv", "segv")));
       },
       {"plugin 'tp_segv' (", "a_bad/plugin.toml): crashed with SIGSEGV",
        "the host did not load it"},
       false},
      {"aborts_while_registering", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_abort", manifest_text(spec_for("tp_abort", "abort")));
       },
       {"a_bad/plugin.toml): crashed with SIGABRT"}, false},
      {"exits_while_registering", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_exit", manifest_text(spec_for("tp_exit", "exit")));
       },
       {"a_bad/plugin.toml): ended the process with exit status 3"}, false},
      {"group_writable_manifest", a,
       [a](const fs::path& p, const fs::path&) {
         make_beta(p, a, beta_manifest());
         fs::permissions(p / a / "plugin.toml", fs::perms(0664));
       },
       {"plugin manifest is writable by its group (mode 0664)"}, false},
      {"register_engines_throws", a,
       [a](const fs::path& p, const fs::path&) {
         make_plugin(p, a, "tp_throws", manifest_text(spec_for("tp_throws", "throws")));
       },
       {"register_engines threw: test plugin refuses to register"}, true},
      {"name_differs_from_library", a,
       [a](const fs::path& p, const fs::path&) {
         ManifestSpec spec = spec_for("tp_beta", "beta");
         spec.name = "gamma";
         make_beta(p, a, manifest_text(spec));
       },
       {"the library calls itself 'tp_beta' but its manifest is named 'gamma'"}, true},
  };
  return cases;
}

class BadPlugin : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadPlugin, IsRejectedAndLeavesRegistryAsBefore) {
  const BadCase& c = GetParam();
  if (c.needs_root && ::geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root";
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  fs::path good = make_plugin(search, "m_alpha", "tp_alpha", good_alpha_manifest());
  c.make(search, good);

  EngineRegistry registry;
  register_builtin(registry);
  std::vector<std::string> expected = snapshot(registry);
  std::string alpha_manifest = (good / "plugin.toml").string();
  expected.push_back("(language_model, alpha, cpu) | tp_alpha | " + alpha_manifest);
  expected.push_back("(value_model, alpha, cpu) | tp_alpha | " + alpha_manifest);
  std::sort(expected.begin(), expected.end());

  size_t opened_before = opened_plugin_library_count();
  PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);

  ASSERT_EQ(report.rejected.size(), 1u) << (report.rejected.size() > 1 ? report.rejected[1].reason : "");
  EXPECT_EQ(report.rejected[0].path, search / c.dir_name / "plugin.toml");
  for (const auto& part : c.reason_contains) {
    EXPECT_NE(report.rejected[0].reason.find(part), std::string::npos)
        << "reason: " << report.rejected[0].reason << "\nexpected to contain: " << part;
  }
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_EQ(report.loaded[0].manifest.name, "tp_alpha");
  std::vector<std::string> actual = snapshot(registry);
  std::sort(actual.begin(), actual.end());
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(opened_plugin_library_count() - opened_before, c.opens_library ? 2u : 1u);

  auto engine = registry.create("value_model", "alpha", "cpu", EngineArgs{});
  EXPECT_EQ(engine->lr_scheduler_step(), 1.0);  // tp_alpha's id: the good plugin's factory built it
}

INSTANTIATE_TEST_SUITE_P(Loader, BadPlugin, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.label; });

TEST(PluginLoader, LoadsTheManifestCMakeRendered) {
  fs::path dir = fs::path(ENGINERY_TEST_PLUGIN_DIR) / "tp_alpha";
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{dir, "--plugin-dir", true}}).load(registry);
  ASSERT_TRUE(report.ok()) << report.rejected[0].reason;
  ASSERT_EQ(report.loaded.size(), 1u);
  ASSERT_TRUE(report.loaded[0].manifest.sha256.has_value());
  EXPECT_TRUE(report.loaded[0].verified);
  auto engines = registry.list();
  ASSERT_EQ(engines.size(), 2u);
  EXPECT_EQ(engines[0].key, (EngineKey{"language_model", "alpha", "cpu"}));
  // Read from the registration's traits, not the manifest.
  EXPECT_EQ(engines[0].capabilities, (std::vector<std::string>{"multi-rank", "precision-cpu-fp32"}));
}

// An engine whose registration does not declare offload keeps BaseEngine's move_state, which refuses by name.
TEST(PluginLoader, AnEngineWithoutOffloadRefusesToByName) {
  fs::path dir = fs::path(ENGINERY_TEST_PLUGIN_DIR) / "tp_alpha";
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{dir, "--plugin-dir", true}}).load(registry);
  ASSERT_TRUE(report.ok()) << report.rejected[0].reason;
  auto engine = registry.create("language_model", "alpha", "cpu", EngineArgs{});
  try {
    engine->to(torch::kCPU);
    ADD_FAILURE() << "to() on an engine without offload did not throw";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("does not implement to(cpu)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("capability 'offload'"), std::string::npos) << e.what();
  }
}

TEST(PluginLoader, EmptyDirectoryLoadsNothingAndRejectsNothing) {
  TempDir tmp;
  fs::path empty = make_dir(tmp.path() / "empty");
  EngineRegistry registry;
  register_builtin(registry);
  auto before = snapshot(registry);
  PluginLoadReport report = PluginLoader({{empty, "--plugin-dir", true}}).load(registry);
  EXPECT_TRUE(report.ok());
  EXPECT_TRUE(report.loaded.empty());
  EXPECT_EQ(snapshot(registry), before);
}

TEST(PluginLoader, NonexistentDirectoryIsReportedAndOthersStillLoad) {
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  make_plugin(search, "alpha", "tp_alpha", good_alpha_manifest());
  EngineRegistry registry;
  PluginLoadReport report =
      PluginLoader({{tmp.path() / "missing", "--plugin-dir", true}, {search, "ENGINERY_PLUGIN_PATH", true}})
          .load(registry);
  ASSERT_EQ(report.rejected.size(), 1u);
  EXPECT_EQ(report.rejected[0].path, tmp.path() / "missing");
  EXPECT_EQ(report.rejected[0].reason, "plugin directory does not exist (from --plugin-dir)");
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_TRUE(registry.has({"language_model", "alpha", "cpu"}));
}

TEST(PluginLoader, MissingInstallDefaultIsQuiet) {
  TempDir tmp;
  EngineRegistry registry;
  auto path = PluginLoader::search_path({}, "--plugin-dir", nullptr, tmp.path() / "not-installed");
  PluginLoadReport report = PluginLoader(path).load(registry);
  EXPECT_TRUE(report.ok());
  EXPECT_TRUE(report.loaded.empty());
}

TEST(PluginLoader, PluginDirectoryGivenDirectlyAndTwiceLoadsOnce) {
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  fs::path alpha = make_plugin(search, "alpha", "tp_alpha", good_alpha_manifest());
  EngineRegistry registry;
  PluginLoadReport report =
      PluginLoader({{alpha, "--plugin-dir", true}, {search, "ENGINERY_PLUGIN_PATH", true}}).load(registry);
  EXPECT_TRUE(report.ok()) << report.rejected[0].reason;
  EXPECT_EQ(report.loaded.size(), 1u);
  EXPECT_EQ(registry.list().size(), 2u);
}

// A plugin that fails a check claims nothing, its name included: the plugin of that name later on the search path
// (the bundled one after a stale copy on ENGINERY_PLUGIN_PATH) still loads.
TEST(PluginLoader, ARejectedPluginLeavesItsNameToTheNextPluginOfThatName) {
  TempDir tmp;
  ManifestSpec stale = spec_for("tp_alpha", "alpha");
  stale.extra = sha256_line(std::string(64, 'f'));
  fs::path rejected = make_plugin(make_dir(tmp.path() / "env"), "alpha", "tp_alpha", manifest_text(stale));
  fs::path bundled = make_plugin(make_dir(tmp.path() / "installed"), "alpha", "tp_alpha", good_alpha_manifest());
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{tmp.path() / "env", "ENGINERY_PLUGIN_PATH", true},
                                          {tmp.path() / "installed", "install default", false}})
                                .load(registry);
  ASSERT_EQ(report.rejected.size(), 1u);
  EXPECT_EQ(report.rejected[0].path, rejected / "plugin.toml");
  EXPECT_NE(report.rejected[0].reason.find("sha256 mismatch"), std::string::npos) << report.rejected[0].reason;
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_EQ(report.loaded[0].manifest.file, bundled / "plugin.toml");
  EXPECT_TRUE(report.shadowed.empty());
  const EngineOrigin* origin = registry.origin({"language_model", "alpha", "cpu"});
  ASSERT_NE(origin, nullptr);
  EXPECT_EQ(origin->manifest, (bundled / "plugin.toml").string());
}

// The same plugin in two search directories (a copy on --plugin-dir and the bundled one) is one plugin: the one
// earlier on the search path loads, the other is left with a note, and nothing is rejected.
TEST(PluginLoader, TheSamePluginFoundTwiceLoadsOnceFromTheEarlierDirectory) {
  TempDir tmp;
  fs::path copy = make_plugin(make_dir(tmp.path() / "named"), "alpha", "tp_alpha", good_alpha_manifest());
  fs::path bundled = make_plugin(make_dir(tmp.path() / "installed"), "alpha", "tp_alpha", good_alpha_manifest());
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{tmp.path() / "named", "--plugin-dir", true, /*required=*/true},
                                          {tmp.path() / "installed", "install default", false}})
                                .load(registry);
  EXPECT_TRUE(report.ok()) << (report.rejected.empty() ? "" : report.rejected[0].reason);
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_EQ(report.loaded[0].manifest.file, copy / "plugin.toml");
  ASSERT_EQ(report.shadowed.size(), 1u);
  EXPECT_EQ(report.shadowed[0].path, bundled / "plugin.toml");
  EXPECT_EQ(report.shadowed[0].name, "tp_alpha");
  EXPECT_EQ(report.shadowed[0].note,
            "plugin 'tp_alpha' (" + (bundled / "plugin.toml").string() + ") not loaded: the same plugin (same sha256) "
            "was loaded from " + (copy / "plugin.toml").string() + ", earlier on the search path (--plugin-dir)");
  EXPECT_EQ(registry.list().size(), 2u);
}

// Another library under a name already loaded is shadowed by the earlier one, as a program later on PATH is: the
// note says which won; the later one's code never runs (it would register the same engines).
TEST(PluginLoader, APluginOfANameAlreadyLoadedIsShadowedWithANote) {
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  fs::path alpha = make_plugin(search, "m_alpha", "tp_alpha", good_alpha_manifest());
  ManifestSpec spec = spec_for("tp_beta", "beta");
  spec.name = "tp_alpha";
  fs::path other = make_plugin(search, "z_same", "tp_beta", manifest_text(spec));
  EngineRegistry registry;
  size_t opened_before = opened_plugin_library_count();
  PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true, /*required=*/true}}).load(registry);
  EXPECT_TRUE(report.ok()) << (report.rejected.empty() ? "" : report.rejected[0].reason);
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_EQ(report.loaded[0].manifest.file, alpha / "plugin.toml");
  ASSERT_EQ(report.shadowed.size(), 1u);
  EXPECT_EQ(report.shadowed[0].path, other / "plugin.toml");
  EXPECT_EQ(report.shadowed[0].note,
            "plugin 'tp_alpha' (" + (other / "plugin.toml").string() + ") not loaded: another plugin of that name "
            "(version 0.0.1, another library) was loaded from " + (alpha / "plugin.toml").string() +
            ", earlier on the search path (--plugin-dir)");
  EXPECT_EQ(opened_plugin_library_count() - opened_before, 1u);
  EXPECT_FALSE(registry.has({"language_model", "beta", "cpu"}));
}

TEST(PluginLoader, SearchPathOrderAndColonSeparatedEnvironment) {
  auto path = PluginLoader::search_path({"/cfg/a", "/cfg/b"}, "config", "/env/x::/env/y:", "/usr/lib/enginery/plugins");
  ASSERT_EQ(path.size(), 5u);
  std::vector<std::string> dirs;
  for (const auto& dir : path) dirs.push_back(dir.path.string() + " " + dir.source + (dir.must_exist ? " !" : ""));
  EXPECT_EQ(dirs, (std::vector<std::string>{"/cfg/a config !", "/cfg/b config !", "/env/x ENGINERY_PLUGIN_PATH !",
                                            "/env/y ENGINERY_PLUGIN_PATH !", "/usr/lib/enginery/plugins install default"}));
  EXPECT_EQ(PluginLoader::search_path({}, "config", "", "").size(), 0u);
}

TEST(PluginLoader, EnginesKeepWorkingAndLibrariesStayLoadedAfterTheRegistryDies) {
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  fs::path alpha = make_plugin(search, "alpha", "tp_alpha", good_alpha_manifest());
  std::shared_ptr<BaseEngine> engine;
  {
    EngineRegistry registry;
    ASSERT_TRUE(PluginLoader({{search, "--plugin-dir", true}}).load(registry).ok());
    EngineArgs args;
    args.rank = 3;
    args.world_size = 4;
    engine = registry.create("language_model", "alpha", "cpu", args);
  }
  EXPECT_EQ(engine->get_data_parallel_rank(), 3);
  EXPECT_EQ(engine->get_data_parallel_size(), 4);
  engine.reset();
  void* handle = dlopen((alpha / "libtp_alpha.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr) << "the plugin library was unloaded";
  if (handle) dlclose(handle);
}

// The brief of the crash probe in one directory: two plugins that kill their process while registering, one good.
TEST(PluginLoader, CrashingPluginsAreSkippedWithTheirSignalAndTheOthersLoad) {
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  make_plugin(search, "abort", "tp_abort", manifest_text(spec_for("tp_abort", "abort")));
  make_plugin(search, "alpha", "tp_alpha", good_alpha_manifest());
  make_plugin(search, "segv", "tp_segv", manifest_text(spec_for("tp_segv", "segv")));
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);
  ASSERT_EQ(report.rejected.size(), 2u);
  EXPECT_EQ(report.rejected[0].path, search / "abort" / "plugin.toml");
  EXPECT_NE(report.rejected[0].reason.find((search / "abort" / "plugin.toml").string() + "): crashed with SIGABRT"),
            std::string::npos)
      << report.rejected[0].reason;
  EXPECT_EQ(report.rejected[1].path, search / "segv" / "plugin.toml");
  EXPECT_NE(report.rejected[1].reason.find((search / "segv" / "plugin.toml").string() + "): crashed with SIGSEGV"),
            std::string::npos)
      << report.rejected[1].reason;
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_EQ(report.loaded[0].manifest.name, "tp_alpha");
  EXPECT_TRUE(registry.has({"language_model", "alpha", "cpu"}));
}

TEST(PluginProbe, PassesAGoodPluginAndKillsAHangingOneAtItsDeadline) {
  TempDir tmp;
  fs::path alpha = make_plugin(tmp.path(), "alpha", "tp_alpha", good_alpha_manifest());
  PluginManifest good = parse_manifest(alpha / "plugin.toml");
  EXPECT_NO_THROW(probe_plugin(good, alpha / "libtp_alpha.so", "alpha"));

  fs::path hang = make_plugin(tmp.path(), "hang", "tp_hang", manifest_text(spec_for("tp_hang", "hang")));
  PluginManifest hanging = parse_manifest(hang / "plugin.toml");
  auto start = std::chrono::steady_clock::now();
  try {
    probe_plugin(hanging, hang / "libtp_hang.so", "plugin 'tp_hang'", std::chrono::milliseconds(300));
    ADD_FAILURE() << "a hanging plugin passed the probe";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("plugin 'tp_hang': did not finish within 300 ms"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(PluginProbe, NamesSignals) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(SIGBUS), "SIGBUS");
  EXPECT_EQ(signal_name(63), "signal 63");
}

TEST(PluginLoader, WorldWritableDirectoryAboveThePluginIsRefused) {
  TempDir tmp;
  fs::path outer = make_dir(tmp.path() / "outer");
  fs::path search = make_dir(outer / "plugins");
  make_plugin(search, "alpha", "tp_alpha", good_alpha_manifest());
  fs::permissions(outer, fs::perms(0777));
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);
  ASSERT_EQ(report.rejected.size(), 1u);
  EXPECT_NE(report.rejected[0].reason.find(outer.string() + ": directory on the plugin's path (above the plugin " +
                                           "directory) is writable by anyone (mode 0777)"),
            std::string::npos)
      << report.rejected[0].reason;
  EXPECT_TRUE(report.loaded.empty());
}

// /tmp's case: a root-owned sticky directory is a safe ancestor even though anyone may create entries in it; the
// same mode on a directory owned by someone else is not.
TEST(PluginLoader, StickyDirectoryAboveThePluginIsAcceptedOnlyWhenRootOwnsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "a root-owned directory needs root";
  TempDir tmp;
  fs::path outer = make_dir(tmp.path() / "outer");
  fs::path search = make_dir(outer / "plugins");
  make_plugin(search, "alpha", "tp_alpha", good_alpha_manifest());
  fs::permissions(outer, fs::perms(01777));
  {
    EngineRegistry registry;
    PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);
    EXPECT_TRUE(report.ok()) << report.rejected[0].reason;
    EXPECT_EQ(report.loaded.size(), 1u);
  }
  chown_to_nobody(outer);
  fs::permissions(outer, fs::perms(01777));  // chown clears nothing on a directory, but be explicit
  EngineRegistry registry;
  PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);
  ASSERT_EQ(report.rejected.size(), 1u);
  EXPECT_NE(report.rejected[0].reason.find(outer.string() + ": directory on the plugin's path (above the plugin " +
                                           "directory) is owned by uid 65534"),
            std::string::npos)
      << report.rejected[0].reason;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(PluginLoader, ManifestWithoutSha256LoadsOnlyWithTheDevelopmentEscapeHatchAndSaysSo) {
  TempDir tmp;
  fs::path search = make_dir(tmp.path() / "plugins");
  ManifestSpec spec = spec_for("tp_alpha", "alpha");
  spec.extra = "";
  make_plugin(search, "alpha", "tp_alpha", manifest_text(spec));
  {
    ScopedEnv unset(kAllowUnverifiedPluginsEnv, "0");
    EngineRegistry registry;
    PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);
    ASSERT_EQ(report.rejected.size(), 1u);
    EXPECT_NE(report.rejected[0].reason.find("has no sha256"), std::string::npos) << report.rejected[0].reason;
  }
  ScopedEnv allow(kAllowUnverifiedPluginsEnv, "1");
  EngineRegistry registry;
  ::testing::internal::CaptureStderr();
  PluginLoadReport report = PluginLoader({{search, "--plugin-dir", true}}).load(registry);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(report.ok()) << report.rejected[0].reason;
  ASSERT_EQ(report.loaded.size(), 1u);
  EXPECT_FALSE(report.loaded[0].verified);
  EXPECT_NE(warned.find("warning: plugin 'tp_alpha' (" + (search / "alpha" / "plugin.toml").string() +
                        ") loaded WITHOUT sha256 verification"),
            std::string::npos)
      << warned;

  // The hatch admits a missing digest, never a wrong one.
  spec.extra = sha256_line(std::string(64, 'f'));
  write_file(search / "alpha" / "plugin.toml", manifest_text(spec));
  EngineRegistry other;
  PluginLoadReport wrong = PluginLoader({{search, "--plugin-dir", true}}).load(other);
  ASSERT_EQ(wrong.rejected.size(), 1u);
  EXPECT_NE(wrong.rejected[0].reason.find("sha256 mismatch"), std::string::npos) << wrong.rejected[0].reason;
}

}  // namespace
}  // namespace enginery::test
