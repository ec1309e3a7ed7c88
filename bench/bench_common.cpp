#include "bench/bench_common.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "launch/rendezvous.h"
#include "launch/world_group.h"
#include "registry/plugin_loader.h"
#include "support/torch_compat.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace bench {

void add_engine_flags(CLI::App& app, EngineFlags& f) {
  app.add_option("--model", f.model_dir, "HF model directory (config.json + safetensors) or builtin:<name>")
      ->required();
  app.add_option("--plugin-dir", f.plugin_dir)->required();
  app.add_option("--device", f.device);
  app.add_option("--backend", f.backend);
  app.add_option("--mbs", f.mbs, "engine.micro_batch_size_per_gpu");
  app.add_option("--steps", f.steps, "timed steps");
  app.add_option("--warmup", f.warmup, "untimed steps first");
  app.add_option("--lr", f.lr);
  app.add_flag("--ac", f.ac, "activation checkpointing (model.enable_gradient_checkpointing)");
  app.add_option("--ac-policy", f.ac_policy,
                 "engine.<backend>.gradient_checkpointing_policy with --ac: layer or mlp")
      ->check(CLI::IsMember({"layer", "mlp"}));
  app.add_flag("--param-offload", f.param_offload, "engine.param_offload: masters, shard grads in pinned host memory");
  app.add_flag("--optimizer-offload", f.optimizer_offload, "engine.optimizer_offload: AdamW state in host memory");
  app.add_option("--offload-step", f.offload_step, "engine.<backend>.offload_step: device (streamed) or host");
  app.add_option("--fp8", f.fp8,
                 "engine.<backend>.fp8: off, tensorwise or delayed (FP8 matmuls in the decoder layers)");
  app.add_option("--out", f.out, "append the JSON result here");
}

Rank join_world(const std::string& device) {
  Rank r;
  // The host's one way to become a rank (launch/): RANK/WORLD_SIZE/... as torchrun sets them, else one rank.
  r.env = rank_env_from_environment().value_or(RankEnv{});
  r.store = r.env.world_size == 1
                ? make_file_store((std::filesystem::temp_directory_path() /
                                   ("enginery-bench-store-" + std::to_string(getpid()))).string(), 1)
                : join_rendezvous(r.env);
  if (device == "cuda") {
    compat::cuda_set_device(r.env.local_rank);
    r.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r.env.local_rank));
  }
  r.group = make_world_group(r.store, r.env.rank, r.env.world_size, device);
  return r;
}

EngineArgs engine_args(const Rank& rank, const EngineFlags& f) {
  EngineArgs args;
  args.rank = rank.env.rank;
  args.world_size = rank.env.world_size;
  args.local_rank = rank.env.local_rank;
  args.world_group = rank.group;
  args.store = rank.store;
  args.model.path = f.model_dir;
  args.model.enable_gradient_checkpointing = f.ac;
  // Passed whenever asked for, so the engine refuses "mlp" without --ac by name instead of it being dropped here.
  if (f.ac || f.ac_policy != "layer") args.engine.backend_options["gradient_checkpointing_policy"] = f.ac_policy;
  args.engine.strategy = f.backend;
  args.engine.micro_batch_size_per_gpu = f.mbs;
  args.engine.param_offload = f.param_offload;
  args.engine.optimizer_offload = f.optimizer_offload;
  if (!f.offload_step.empty()) args.engine.backend_options["offload_step"] = f.offload_step;
  if (!f.fp8.empty()) args.engine.backend_options["fp8"] = f.fp8;
  args.engine.mixed_precision = MixedPrecisionConfig{c10::kBFloat16, c10::kFloat, c10::kFloat};
  args.optim.lr = f.lr;
  args.optim.weight_decay = 0.01;
  args.optim.clip_grad = 1.0;
  args.optim.total_training_steps = f.warmup + f.steps;
  return args;
}

std::shared_ptr<BaseEngine> load_engine(const EngineFlags& f, const EngineArgs& args) {
  EngineRegistry registry;
  PluginLoader loader(PluginLoader::search_path({f.plugin_dir}, "--plugin-dir", nullptr, {}));
  const auto loaded = loader.load(registry);
  for (const auto& r : loaded.rejected) std::cerr << "rejected plugin " << r.path << ": " << r.reason << "\n";
  // The engine keeps its plugin's library alive (registry/engine_registry.h), so the registry may go.
  auto engine = registry.create("language_model", f.backend, f.device, args);
  engine->initialize();
  return engine;
}

StepLog run_steps(BaseEngine& engine, const std::function<Batch(int64_t)>& batch_for_step, const LossFn& loss,
                  int64_t warmup, int64_t steps, int64_t rank) {
  const torch::Device device = engine.device();
  compat::cuda_reset_peak_memory();
  StepLog log;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    Batch batch = batch_for_step(step);
    compat::device_synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    BatchOutput result = train_batch(engine, batch, loss);
    const double value = result.loss.item<double>();  // the step's only host sync, after the step
    compat::device_synchronize(device);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log.losses.push_back(value);
    log.grad_norms.push_back(result.grad_norm.defined() ? result.grad_norm.item<double>() : 0.0);
    if (step >= warmup) log.seconds.push_back(dt);
    if (rank == 0) std::cerr << "step " << step << " loss " << value << " " << dt << " s\n";
  }
  return log;
}

double peak_memory_gib(const std::string& device) {
  if (device == "cuda") return compat::cuda_peak_allocated_gib();
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);
  }
  return 0.0;
}

double mean(const std::vector<double>& values) {
  double total = 0.0;
  for (double v : values) total += v;
  return values.empty() ? 0.0 : total / static_cast<double>(values.size());
}

void report(const nlohmann::json& result, int64_t rank, const std::string& out) {
  if (rank != 0) return;
  std::cout << result.dump() << std::endl;
  if (!out.empty()) std::ofstream(out, std::ios::app) << result.dump() << "\n";
}

}  // namespace bench
}  // namespace enginery
