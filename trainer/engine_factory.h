#pragma once
// The trainer's one door to the plugins: load them (PluginLoader) into an EngineRegistry and create the engine
// for (model_type, engine.strategy, device).
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "config/engine_settings.h"
#include "host_api/base_engine.h"
#include "registry/engine_registry.h"
#include "registry/plugin_loader.h"

namespace enginery {

// The directories the user named, which must each exist and yield a plugin that loads (PluginSearchDir::required):
// `cli_dirs` (--plugin-dir) when given, which win over the config as --set does, else plugins.dirs from the config;
// when neither names one, `build_tree_dir` (plugins/ beside bin/), quietly skipped when absent. Then
// ENGINERY_PLUGIN_PATH, then `install_default`.
std::vector<PluginSearchDir> plugin_search_path(const TrainConfig& config, const std::vector<std::string>& cli_dirs,
                                                const std::string& build_tree_dir, const std::string& install_default);

// Where this executable's own installation keeps its plugins, found from the executable's path
// (<prefix>/bin/enginery -> <prefix>/lib/enginery/plugins), so a copy installed with any --prefix finds them.
std::string installed_plugin_dir();
// The build tree's plugins/ beside bin/ (where a build-tree executable finds the plugins built with it).
std::string build_tree_plugin_dir();

// "cuda" when trainer.device is cuda, or auto and LibTorch sees a GPU; else "cpu".
std::string resolve_device(const TrainConfig& config);

// Loads every plugin into `registry`; a rejected plugin is reported on `log` (when non-null). A required directory
// (plugin_search_path) that gave nothing throws EngineryError naming it (check_required_dirs).
PluginLoadReport load_plugins(EngineRegistry& registry, const std::vector<PluginSearchDir>& search_path,
                              std::ostream* log);

// Throws EngineryError naming where engine.strategy was set (file:line:col or the flag) when the registry has no
// engine for (model_type, strategy, device); the allowed list names every registered backend and its plugin, and
// any plugin that was rejected. Then refuses every key the engine does not honour at `world_size` ranks, naming
// where that key was set, and a GRPO rollout.temperature other than 1 for an engine without the capability
// 'temperature'.
void check_engine_available(const EngineRegistry& registry, const PluginLoadReport& report, const TrainConfig& config,
                            const std::string& device, int64_t world_size);

std::shared_ptr<BaseEngine> create_engine(const EngineRegistry& registry, const TrainConfig& config,
                                          const EngineArgs& args);

}  // namespace enginery
