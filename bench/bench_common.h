#pragma once
// What the step benchmarks (bench_engine_train, bench_rl_step) share: becoming a rank as the host does
// (docs/ARCHITECTURE.md, "Launching ranks"), loading the engine through the plugin registry ("Plugins and
// packaging"), the timed step loop and the one-line JSON report.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "launch/rank_env.h"

namespace enginery {
namespace bench {

// Flags every step benchmark takes.
struct EngineFlags {
  std::string model_dir, plugin_dir, device = "cuda", backend = "fsdp2", out;
  int64_t mbs = 2, steps = 20, warmup = 5;
  bool ac = false;
  std::string ac_policy = "layer";  // engine.<backend>.gradient_checkpointing_policy, with ac
  bool param_offload = false, optimizer_offload = false;  // engine.param_offload / engine.optimizer_offload
  std::string offload_step;                               // engine.<backend>.offload_step (device, host)
  std::string fp8;                                        // engine.<backend>.fp8 (off, tensorwise, delayed)
  double lr = 1e-5;
};
void add_engine_flags(CLI::App& app, EngineFlags& flags);

// This process as a rank: RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun --no-python) or one rank alone.
struct Rank {
  RankEnv env;
  StorePtr store;
  CommGroupPtr group;
  torch::Device device{torch::kCPU};
};
Rank join_world(const std::string& device);

// The benchmarks' common engine settings (bf16 compute, fp32 reduction and master weights, AdamW with weight decay
// 0.01, gradient clipping at 1.0); callers add what their mode needs before load_engine.
EngineArgs engine_args(const Rank& rank, const EngineFlags& flags);

// Loads the plugins of flags.plugin_dir (rejected ones are reported on stderr), creates the backend's
// language-model engine and initializes it.
std::shared_ptr<BaseEngine> load_engine(const EngineFlags& flags, const EngineArgs& args);

// Per step, in order: train_batch's loss (this rank's share), grad norm and wall time (the host waits for the
// device before and after). Times exclude the first `warmup` steps.
struct StepLog {
  std::vector<double> losses, grad_norms, seconds;
};
StepLog run_steps(BaseEngine& engine, const std::function<Batch(int64_t step)>& batch_for_step, const LossFn& loss,
                  int64_t warmup, int64_t steps, int64_t rank);

// Peak memory of this rank: CUDA memory allocated since run_steps began, or on CPU the process's peak resident set
// (VmHWM, which counts pinned host memory too: what offloading spends).
double peak_memory_gib(const std::string& device);

double mean(const std::vector<double>& values);

// Rank 0 prints `result` as one JSON line and appends it to `out` when set.
void report(const nlohmann::json& result, int64_t rank, const std::string& out);

}  // namespace bench
}  // namespace enginery
