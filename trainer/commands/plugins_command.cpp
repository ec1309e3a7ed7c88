// `enginery plugins [--plugin-dir D ...]`: every plugin found on the search path with its engines, every plugin left
// out because one of its name came first (a note, not a failure), and every rejected plugin with its reason. Exit
// status 1 when any plugin was rejected, or when a --plugin-dir does not exist or holds no plugin that loads (an
// error naming it).
#include <cstdlib>
#include <iostream>
#include <memory>

#include "registry/plugin_loader.h"
#include "support/list_text.h"
#include "trainer/command.h"
#include "trainer/engine_factory.h"

namespace enginery {
namespace {

int run_plugins(const std::vector<std::string>& plugin_dirs) {
  // The same search path `enginery train` uses with no plugins.dirs in its config, so the two always agree.
  PluginLoader loader(plugin_search_path(TrainConfig{}, plugin_dirs, build_tree_plugin_dir(), installed_plugin_dir()));
  EngineRegistry registry;
  PluginLoadReport report = loader.load(registry);

  std::cout << "search path:\n";
  for (const auto& dir : report.searched) {
    std::error_code ec;
    std::cout << "  " << dir.path.string() << "  (" << dir.source
              << (std::filesystem::exists(dir.path, ec) ? "" : ", missing") << ")\n";
  }
  const std::vector<EngineInfo> engines = registry.list();
  std::cout << "plugins loaded: " << report.loaded.size() << "\n";
  for (const auto& plugin : report.loaded) {
    std::cout << "  " << plugin.manifest.name << " " << plugin.manifest.version << "  ("
              << plugin.manifest.file.string() << ")\n";
    for (const auto& engine : plugin.manifest.engines) {
      std::cout << "    " << engine.key.model_type << " / " << engine.key.backend << " / " << engine.key.device;
      // What the engine declared at registration (docs/ARCHITECTURE.md, "The contract").
      for (const auto& info : engines) {
        if (info.key == engine.key && !info.capabilities.empty()) {
          std::cout << "  [" << join_list(info.capabilities) << "]";
        }
      }
      std::cout << "\n";
    }
  }
  if (!report.shadowed.empty()) {
    std::cout << "plugins shadowed: " << report.shadowed.size() << "\n";
    for (const auto& shadowed : report.shadowed) std::cout << "  note: " << shadowed.note << "\n";
  }
  std::cout << "plugins rejected: " << report.rejected.size() << "\n";
  for (const auto& rejected : report.rejected) {
    std::cout << "  " << (rejected.name.empty() ? "" : rejected.name + "  ") << "(" << rejected.path.string()
              << ")\n    " << rejected.reason << "\n";
  }
  for (const auto& unusable : report.unusable_dirs) {
    std::cerr << "enginery plugins: error: " << unusable.message << std::endl;
  }
  return report.ok() ? 0 : 1;
}

const CommandRegistration kPluginsCommand(
    "plugins", "List the plugins on the search path with their engines, and every rejected plugin with its reason",
    [](CLI::App& sub) -> std::function<int()> {
      auto dirs = std::make_shared<std::vector<std::string>>();
      sub.add_option("--plugin-dir", *dirs,
                     "A plugin directory, or a directory of plugin directories; searched before " +
                         std::string(kPluginPathEnv) + " and <prefix>/lib/enginery/plugins (repeatable; default: the "
                         "build tree's plugins/ beside bin/); each must exist and hold a plugin that loads");
      return [dirs] { return run_plugins(*dirs); };
    });

}  // namespace
}  // namespace enginery
