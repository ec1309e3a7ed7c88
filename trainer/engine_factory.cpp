#include "trainer/engine_factory.h"

#include <torch/cuda.h>

#include <algorithm>
#include <sstream>

#include "host_api/error.h"
#include "launch/spawn.h"

namespace enginery {

std::vector<PluginSearchDir> plugin_search_path(const TrainConfig& config, const std::vector<std::string>& cli_dirs,
                                                const std::string& build_tree_dir, const std::string& install_default) {
  std::vector<std::filesystem::path> dirs;
  std::string source;
  if (!cli_dirs.empty()) {
    dirs.assign(cli_dirs.begin(), cli_dirs.end());
    source = "--plugin-dir";
  } else if (!config.plugins.dirs.empty()) {
    dirs.assign(config.plugins.dirs.begin(), config.plugins.dirs.end());
    source = "plugins.dirs (" + config.where("plugins.dirs") + ")";
  } else {
    dirs.emplace_back(build_tree_dir);
    source = "build tree";
  }
  auto path = PluginLoader::search_path(dirs, source, std::getenv(kPluginPathEnv), install_default);
  for (auto& dir : path) {
    if (dir.source != source) continue;
    // The build-tree default is a guess, quietly absent in an installed copy; a directory the user named is not.
    if (source == "build tree") {
      dir.must_exist = false;
    } else {
      dir.required = true;
    }
  }
  return path;
}

namespace {
std::filesystem::path above_bin() { return std::filesystem::path(self_executable()).parent_path().parent_path(); }
}  // namespace

std::string installed_plugin_dir() { return (above_bin() / ENGINERY_INSTALL_PLUGIN_DIR).string(); }

std::string build_tree_plugin_dir() { return (above_bin() / "plugins").string(); }

std::string resolve_device(const TrainConfig& config) {
  if (config.trainer.device == "auto") return torch::cuda::is_available() ? "cuda" : "cpu";
  return config.trainer.device;
}

PluginLoadReport load_plugins(EngineRegistry& registry, const std::vector<PluginSearchDir>& search_path,
                              std::ostream* log) {
  PluginLoader loader(search_path);
  PluginLoadReport report = loader.load(registry);
  if (log != nullptr) {
    for (const auto& rejected : report.rejected) {
      *log << "warning: plugin " << (rejected.name.empty() ? "" : "'" + rejected.name + "' ") << "at "
           << rejected.path.string() << " skipped: " << rejected.reason << "\n";
    }
    for (const auto& shadowed : report.shadowed) *log << "note: " << shadowed.note << "\n";
  }
  check_required_dirs(report);
  return report;
}

namespace {

void check_config_honoured(const EngineRegistry& registry, const EngineKey& key, const TrainConfig& config,
                           int64_t world_size) {
  EngineArgs args;
  args.model_type = key.model_type;
  args.device = key.device;
  args.world_size = world_size;
  set_engine_settings(args, config);
  try {
    registry.check_config(key, args);
  } catch (const EngineryError& e) {
    rethrow_at_origin(e, config);
  }
}

// GRPO takes its old, reference and new log-probs at rollout.temperature, through the batch's `temperature`
// (docs/ARCHITECTURE.md, "One step", Temperature); an engine that did not declare the capability would take them at 1,
// and the PPO ratio would compare another distribution than the one sampled from.
void check_temperature_honoured(const EngineRegistry& registry, const EngineKey& key, const TrainConfig& config) {
  if (!config.is_grpo() || config.rollout.temperature == 1.0) return;
  for (const auto& info : registry.list()) {
    if (info.key.str() != key.str()) continue;
    if (info.declared.temperature) return;
    std::ostringstream what;
    what << "rollout.temperature = " << config.rollout.temperature << ": GRPO computes its log-probs at the "
         << "rollout's temperature, and engine " << key.str() << " (" << info.origin.str()
         << ") does not apply one (it does not declare the capability 'temperature')";
    throw EngineryError(what.str(), config.where("rollout.temperature"),
                        "rollout.temperature = 1, or an engine whose plugin declares the capability 'temperature'");
  }
}

}  // namespace

void check_engine_available(const EngineRegistry& registry, const PluginLoadReport& report, const TrainConfig& config,
                            const std::string& device, int64_t world_size) {
  const EngineKey key{config.model_type(), config.engine.strategy, device};
  if (registry.has(key)) {
    check_config_honoured(registry, key, config, world_size);
    check_temperature_honoured(registry, key, config);
    return;
  }
  std::string allowed;
  for (const auto& info : registry.list()) {
    if (info.key.model_type != key.model_type || info.key.device != key.device) continue;
    allowed += (allowed.empty() ? "" : ", ") + info.key.backend + " (" + info.origin.str() + ")";
  }
  if (allowed.empty()) allowed = "none registered for " + key.model_type + " on " + device;
  std::string searched;
  for (const auto& dir : report.searched) searched += (searched.empty() ? "" : ", ") + dir.path.string();
  std::string what = "engine.strategy = '" + config.engine.strategy + "': no engine " + key.str() +
                     " is registered (plugins searched in: " + (searched.empty() ? "nothing" : searched) + ")";
  for (const auto& rejected : report.rejected) what += "; skipped " + rejected.path.string() + ": " + rejected.reason;
  throw EngineryError(what, config.where("engine.strategy"), allowed);
}

std::shared_ptr<BaseEngine> create_engine(const EngineRegistry& registry, const TrainConfig& config,
                                          const EngineArgs& args) {
  try {
    return registry.create(config.model_type(), config.engine.strategy, args.device, args);
  } catch (const EngineryError& e) {
    rethrow_at_origin(e, config);
  }
}

}  // namespace enginery
