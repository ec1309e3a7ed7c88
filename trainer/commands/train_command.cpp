// `enginery train --config FILE [--nproc N] [--set key=value ...] [--resume | --fresh-run]`.
#include <c10/util/Exception.h>

#include <filesystem>
#include <iostream>

#include "host_api/error.h"
#include "kernels/fused_cuda.h"
#include "launch/local_launch.h"
#include "launch/spawn.h"
#include "trainer/command.h"
#include "trainer/engine_factory.h"
#include "trainer/preflight.h"
#include "trainer/loop/run_dir.h"
#include "trainer/loop/train_loop.h"

namespace enginery {
namespace {

struct TrainOptions {
  std::string config;
  int nproc = 1;
  std::vector<std::string> overrides;
  std::vector<std::string> plugin_dirs;
  bool resume = false;
  bool fresh_run = false;
};

// The output directory, checked (and an old run moved aside) before anything is written there (run_dir.h).
void prepare_output(const TrainConfig& config, bool fresh_run) {
  const PreparedOutputDir prepared = prepare_output_dir(config, fresh_run);
  if (!prepared.moved_to.empty()) {
    std::cout << "moved the previous run in " << config.output_dir() << " to " << prepared.moved_to << "\n";
  }
  for (const std::string& line : prepared.finished) std::cout << "note: " << line << "\n";
}

// Config and setup errors exit with 2 before any rank starts; a failed rank's status is passed on.
constexpr int kConfigError = 2;

int run_train(const TrainOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (o.resume) overrides.push_back("trainer.resume_mode=\"auto\"");
  TrainConfig config;
  std::optional<RankEnv> env;
  try {
    config = load_train_config(o.config, overrides);
    env = rank_env_from_environment();
    // A bad ENGINERY_CUDA_KERNELS stops here, before any rank starts or (under torchrun, srun) joins a rendezvous.
    kernels::check_runtime_switch();
  } catch (const EngineryError& e) {
    std::cerr << "enginery train: error: " << e.what() << std::endl;
    return kConfigError;
  }
  const auto plugin_path = plugin_search_path(config, o.plugin_dirs, build_tree_plugin_dir(), installed_plugin_dir());

  if (env) {  // one rank of a job (our launcher, torchrun --no-python, srun)
    try {
      // Started by torchrun or srun, rank 0 is the first to see the output directory; our launcher checked it.
      if (!env->spawned_locally && env->rank == 0) prepare_output(config, o.fresh_run);
      return run_rank(config, *env, plugin_path, /*print_config=*/!env->spawned_locally);
    } catch (const c10::Error& e) {
      // The message without LibTorch's backtrace: the launcher quotes a rank's last line to the user.
      std::cerr << "enginery train: error: rank " << env->rank << ": " << e.what_without_backtrace() << std::endl;
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "enginery train: error: rank " << env->rank << ": " << e.what() << std::endl;
      return 1;
    }
  }

  // The local launcher: validate everything, then spawn the ranks.
  const std::string device = resolve_device(config);
  try {
    if (o.nproc < 1) throw EngineryError("must be at least 1, got " + std::to_string(o.nproc), "--nproc");
    preflight_data(config, o.nproc, device);
    EngineRegistry registry;
    const PluginLoadReport report = load_plugins(registry, plugin_path, &std::cerr);
    check_engine_available(registry, report, config, device, o.nproc);
    prepare_output(config, o.fresh_run);
    std::cout << to_toml(config) << std::flush;
    save_resolved_config(config);
  } catch (const std::exception& e) {
    std::cerr << "enginery train: error: " << e.what() << std::endl;
    return kConfigError;
  }
  std::string transport = "Gloo";
  if (device == "cuda") {
    transport = kernels::compiled() ? "NCCL, enginery's CUDA kernels: " + kernels::enabled_kernels_summary()
                                    : "NCCL, enginery's CUDA kernels not built";
  }
  std::cout << "launching " << o.nproc << " rank" << (o.nproc > 1 ? "s" : "") << " on " << device << " ("
            << transport << "), outputs in " << config.output_dir() << "\n"
            << std::flush;

  LaunchOptions launch;
  launch.nproc = o.nproc;
  launch.executable = self_executable();
  launch.args = {"train", "--config", o.config};
  for (const auto& s : overrides) launch.args.insert(launch.args.end(), {"--set", s});
  for (const auto& d : o.plugin_dirs) launch.args.insert(launch.args.end(), {"--plugin-dir", d});
  const LaunchResult result = launch_local(launch, std::cout, std::cerr);
  if (result.exit_code != 0) {
    std::cerr << "enginery train: error: " << result.message << std::endl;
    return result.exit_code;
  }
  return 0;
}

CommandRegistration train_registration(
    "train", "Train a model with a sharded engine from a TOML config (verl names and defaults)",
    [](CLI::App& sub) -> std::function<int()> {
      auto options = std::make_shared<TrainOptions>();
      sub.add_option("--config", options->config, "TOML config (sections trainer, plugins, model, engine, optim, "
                                                  "data, loss, checkpoint)")
          ->required();
      sub.add_option("--nproc", options->nproc, "Local ranks to spawn (ignored when RANK or SLURM_PROCID is set)");
      sub.add_option("--set", options->overrides, "Override a config key: --set trainer.total_training_steps=50")
          ->allow_extra_args(false);
      sub.add_option("--plugin-dir", options->plugin_dirs,
                     "Plugin directory (repeatable; replaces the config's plugins.dirs; default: plugins/ beside "
                     "bin/). Each must exist and hold a plugin that loads, else the run stops naming it")
          ->allow_extra_args(false);
      auto* resume =
          sub.add_flag("--resume", options->resume, "Continue from the newest complete checkpoint (resume_mode auto)");
      sub.add_flag("--fresh-run", options->fresh_run,
                   "Start over in an output directory that already holds a run: its contents are first moved "
                   "to <dir>.old-<UTC time> (without this flag or --resume, such a directory is refused)")
          ->excludes(resume);
      return [options] { return run_train(*options); };
    });

}  // namespace
}  // namespace enginery
