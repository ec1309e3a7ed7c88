// An explicit plugin directory (--plugin-dir of `enginery plugins`, `train`, `conformance`; plugins.dirs of a
// config) that does not exist, or holds no plugin that loads, is an error naming it, through the real executable;
// ENGINERY_PLUGIN_PATH, pointing at the real plugins throughout, never stands in for it (docs/ARCHITECTURE.md,
// "Plugins and packaging").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "support/torch_compat.h"  // compat::remove_all
#include "tests/support/shell_command.h"

namespace fs = std::filesystem;

namespace plugin_dirs_test {  // named: the unity build puts this file beside the other trainer tests

using enginery::test_support::CommandResult;

// `enginery <args>` with ENGINERY_PLUGIN_PATH set to the build's real plugins and `env` (output and error
// together).
CommandResult run_enginery_env(const std::string& env, const std::string& args) {
  const std::string cmd = env + "ENGINERY_PLUGIN_PATH=" + std::string(ENGINERY_PLUGIN_DIR) + " OMP_NUM_THREADS=1 " +
                          std::string(ENGINERY_EXE) + " " + args + " 2>&1";
  return enginery::test_support::run_shell(cmd);
}

CommandResult run_enginery(const std::string& args) { return run_enginery_env("", args); }

// The same as one rank of a torchrun job (RANK, WORLD_SIZE, MASTER_ADDR/PORT) instead of the local launcher.
CommandResult run_enginery_as_rank(const std::string& args) {
  return run_enginery_env("RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ", args);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class PluginDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enginery_plugin_dirs_" + std::to_string(getpid()));
    enginery::compat::remove_all(dir_);
    fs::create_directories(dir_ / "empty");
    // A plugin directory whose only manifest cannot be read: the directory holds a plugin, none that loads.
    fs::create_directories(dir_ / "broken" / "bad_plugin");
    std::ofstream(dir_ / "broken" / "bad_plugin" / "plugin.toml") << "manifest_version = 1\nname = \"bad_plugin\"\n";
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override {
    if (!HasFailure()) enginery::compat::remove_all(dir_);
  }
  std::string missing() const { return (dir_ / "no_such_dir").string(); }
  std::string train_args(const std::string& extra) const {
    return "train --config " + std::string(ENGINERY_SOURCE_DIR) + "/examples/demo.toml --set trainer.device=cpu " +
           "--set trainer.total_training_steps=1 --set trainer.default_local_dir=" + (dir_ / "run").string() + " " +
           extra;
  }
  fs::path dir_;
};

TEST_F(PluginDirs, PluginsCommandLoadsARealDirectory) {  // the control: the same command passes on the real one
  CommandResult ok = run_enginery("plugins --plugin-dir " + std::string(ENGINERY_PLUGIN_DIR));
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_TRUE(has(ok.output, "language_model / fsdp / cpu")) << ok.output;
}

// A copy of the bundled plugin (root-owned, as the build's, so it loads) on --plugin-dir, the bundled one on
// ENGINERY_PLUGIN_PATH: one plugin, loaded once from the directory named first, the other left with a note.
TEST_F(PluginDirs, PluginsCommandLoadsACopyOfTheBundledPluginOnce) {
  const fs::path copy = dir_ / "copy";
  fs::create_directories(copy);
  fs::permissions(copy, fs::perms(0755));
  fs::copy(fs::path(ENGINERY_PLUGIN_DIR) / "enginery_fsdp", copy / "enginery_fsdp");
  CommandResult r = run_enginery("plugins --plugin-dir " + copy.string());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "plugins loaded: 1\n  enginery_fsdp 0.1.0  (" + (copy / "enginery_fsdp").string() +
                                "/plugin.toml)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "plugins shadowed: 1\n  note: plugin 'enginery_fsdp' (" + std::string(ENGINERY_PLUGIN_DIR) +
                                "/enginery_fsdp/plugin.toml) not loaded: the same plugin (same sha256) was loaded "
                                "from " + (copy / "enginery_fsdp").string() + "/plugin.toml, earlier on the search "
                                "path (--plugin-dir)"))
      << r.output;
  EXPECT_TRUE(has(r.output, "plugins rejected: 0")) << r.output;
}

// An installed layout (<prefix>/bin/enginery beside <prefix>/lib/enginery/plugins, as pip installs it) with a stale
// copy of its plugin (wrong sha256) on ENGINERY_PLUGIN_PATH, which comes first: the copy is rejected and claims
// nothing, so the bundled plugin of the same name loads and the run trains.
TEST_F(PluginDirs, TrainUsesTheBundledPluginWhenAStaleCopyOnThePluginPathIsRejected) {
  const fs::path prefix = dir_ / "prefix";
  fs::create_directories(prefix / "bin");
  fs::create_directories(prefix / "lib" / "enginery" / "plugins");
  for (const fs::path& d : {prefix, prefix / "bin", prefix / "lib", prefix / "lib" / "enginery",
                            prefix / "lib" / "enginery" / "plugins"}) {
    fs::permissions(d, fs::perms(0755));
  }
  fs::copy_file(ENGINERY_EXE, prefix / "bin" / "enginery");
  fs::copy(fs::path(ENGINERY_PLUGIN_DIR) / "enginery_fsdp", prefix / "lib" / "enginery" / "plugins" / "enginery_fsdp");

  const fs::path stale = dir_ / "stale" / "enginery_fsdp";
  fs::create_directories(stale.parent_path());
  fs::permissions(stale.parent_path(), fs::perms(0755));
  fs::copy(fs::path(ENGINERY_PLUGIN_DIR) / "enginery_fsdp", stale);
  std::ifstream in(stale / "plugin.toml");
  std::string manifest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = manifest.find("sha256 = \"");
  ASSERT_NE(at, std::string::npos) << manifest;
  manifest.replace(at + 10, 64, std::string(64, 'f'));
  std::ofstream(stale / "plugin.toml", std::ios::trunc) << manifest;

  const CommandResult r = enginery::test_support::run_shell(
      "ENGINERY_PLUGIN_PATH=" + stale.parent_path().string() + " OMP_NUM_THREADS=1 " +
      (prefix / "bin" / "enginery").string() + " " + train_args("--set trainer.val_before_train=false") + " 2>&1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "warning: plugin 'enginery_fsdp' at " + (stale / "plugin.toml").string() + " skipped: "))
      << r.output;
  EXPECT_TRUE(has(r.output, "sha256 mismatch")) << r.output;
  EXPECT_FALSE(has(r.output, "no engine")) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "run" / "summary.txt")) << r.output;
}

TEST_F(PluginDirs, PluginsCommandRefusesAMissingDirectory) {
  CommandResult r = run_enginery("plugins --plugin-dir " + missing());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "enginery plugins: error: --plugin-dir " + missing() + " does not exist")) << r.output;
}

TEST_F(PluginDirs, PluginsCommandRefusesADirectoryWithoutPlugins) {
  const std::string empty = (dir_ / "empty").string();
  CommandResult r = run_enginery("plugins --plugin-dir " + empty);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--plugin-dir " + empty + " holds no plugin (no plugin.toml in it")) << r.output;

  const std::string broken = (dir_ / "broken").string();
  r = run_enginery("plugins --plugin-dir " + broken);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--plugin-dir " + broken + " holds no plugin that loads: " + broken +
                                "/bad_plugin/plugin.toml: "))
      << r.output;
}

TEST_F(PluginDirs, TrainRefusesAMissingPluginDirInsteadOfUsingThePluginPath) {
  CommandResult r = run_enginery(train_args("--plugin-dir " + missing()));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "enginery train: error: --plugin-dir " + missing() + " does not exist")) << r.output;
  EXPECT_FALSE(has(r.output, "launching")) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run"));

  const std::string empty = (dir_ / "empty").string();
  r = run_enginery(train_args("--plugin-dir " + empty));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "enginery train: error: --plugin-dir " + empty + " holds no plugin")) << r.output;

  // One rank started as torchrun starts it fails the same way, before any rendezvous (port 1 is never served).
  CommandResult rank = run_enginery_as_rank(train_args("--plugin-dir " + missing()));
  EXPECT_EQ(rank.status, 1) << rank.output;
  EXPECT_TRUE(has(rank.output, "enginery train: error: rank 0: --plugin-dir " + missing() + " does not exist"))
      << rank.output;
}

TEST_F(PluginDirs, TrainRefusesAConfigPluginDirThatHoldsNothingAndNamesWhereItWasSet) {
  const std::string empty = (dir_ / "empty").string();
  CommandResult r = run_enginery(train_args("--set 'plugins.dirs=[\"" + empty + "\"]'"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "plugins.dirs (--set plugins.dirs=[\"" + empty + "\"]) " + empty + " holds no plugin"))
      << r.output;

  // --plugin-dir replaces plugins.dirs, as --set replaces a config value: the run uses the real directory.
  r = run_enginery(train_args("--set 'plugins.dirs=[\"" + missing() + "\"]' --set trainer.val_before_train=false "
                              "--plugin-dir " + std::string(ENGINERY_PLUGIN_DIR)));
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST_F(PluginDirs, ConformanceRefusesAMissingPluginDir) {
  CommandResult r = run_enginery("conformance --plugin-dir " + missing());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "conformance: error: --plugin-dir " + fs::absolute(missing()).string() +
                                " does not exist"))
      << r.output;
}

}  // namespace plugin_dirs_test
