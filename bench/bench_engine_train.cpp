// One training step of the fsdp2 engine, timed: the C++ side of the comparison with PyTorch FSDP2 + transformers
// (bench/gpu/run_gpu_bench.sh). Loads the engine through the plugin registry exactly as the host does, feeds the
// same token file as the reference script, and prints one JSON line: tokens/s, MFU, peak memory, loss per step.
//
// Ranks: world size 1 by default; RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun --no-python) for more.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <fstream>
#include <iostream>

#include "launch/rank_env.h"
#include "launch/world_group.h"
#include "registry/plugin_loader.h"
#include "support/torch_compat.h"

#if defined(ENGINERY_WITH_CUDA) && __has_include(<torch/csrc/autograd/profiler_kineto.h>)
#include <torch/csrc/autograd/profiler_kineto.h>
#define ENGINERY_BENCH_KINETO 1
#endif

namespace {

// Peak resident set of this process (VmHWM), the CPU side's memory figure.
double peak_rss_gib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / (1024.0 * 1024.0);
  }
  return 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"enginery engine step benchmark"};
  std::string model_dir, tokens_file, plugin_dir, device = "cuda", backend = "fsdp2", out;
  int64_t seq = 4096, mbs = 2, steps = 20, warmup = 5;
  bool ac = false;
  double lr = 1e-5;
  double flops_per_token = 0.0;
  app.add_option("--model", model_dir, "HF model directory (config.json + safetensors)")->required();
  app.add_option("--tokens", tokens_file, "int32 token file (nanoGPT .bin layout), as the reference reads")->required();
  app.add_option("--plugin-dir", plugin_dir)->required();
  app.add_option("--device", device);
  app.add_option("--backend", backend);
  app.add_option("--seq", seq);
  app.add_option("--mbs", mbs);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--lr", lr);
  app.add_option("--flops-per-token", flops_per_token, "model FLOPs per token for MFU (the reference prints it)");
  app.add_flag("--ac", ac, "activation checkpointing per decoder layer");
  app.add_option("--out", out, "append the JSON result here");
  std::string profile;
  app.add_option("--profile", profile, "after the timed steps, profile one more step (CUDA builds: kineto) and "
                 "write its chrome trace here (bench/gpu/profile_summary.py reads it)");
  CLI11_PARSE(app, argc, argv);

  using namespace enginery;
  // The host's one way to become a rank (launch/): RANK/WORLD_SIZE/... as torchrun sets them, else one rank.
  const RankEnv env = rank_env_from_environment().value_or(RankEnv{});
  const int64_t rank = env.rank, world = env.world_size, local_rank = env.local_rank;
  c10::intrusive_ptr<c10d::Store> store =
      world == 1 ? make_file_store((std::filesystem::temp_directory_path() /
                                    ("enginery-bench-store-" + std::to_string(getpid()))).string(), 1)
                 : make_tcp_store(env);
  if (device == "cuda") compat::cuda_set_device(local_rank);
  auto group = make_world_group(store, rank, world, device);

  EngineRegistry registry;
  PluginLoader loader(PluginLoader::search_path({plugin_dir}, "--plugin-dir", nullptr, {}));
  auto report = loader.load(registry);
  for (const auto& r : report.rejected) std::cerr << "rejected plugin " << r.path << ": " << r.reason << "\n";

  EngineArgs args;
  args.rank = rank;
  args.world_size = world;
  args.local_rank = local_rank;
  args.world_group = group;
  args.store = store;
  args.model.path = model_dir;
  args.model.enable_gradient_checkpointing = ac;
  args.engine.strategy = backend;
  args.engine.micro_batch_size_per_gpu = mbs;
  args.engine.mixed_precision = MixedPrecisionConfig{c10::kBFloat16, c10::kFloat, c10::kFloat};
  args.optim.lr = lr;
  args.optim.weight_decay = 0.01;
  args.optim.clip_grad = 1.0;
  args.optim.total_training_steps = warmup + steps;
  auto engine = registry.create("language_model", backend, device, args);
  engine->initialize();

  // Same tokens as the reference: row r of step s is tokens[((s * world + rank) * mbs + r) * seq ...].
  const auto bytes = std::filesystem::file_size(tokens_file);
  std::ifstream in(tokens_file, std::ios::binary);
  std::vector<int32_t> tokens(bytes / sizeof(int32_t));
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(bytes));
  auto all = torch::from_blob(tokens.data(), {static_cast<int64_t>(tokens.size())}, torch::kInt32).to(torch::kLong);

  LossFn sft = [](const ModelOutput& out, const Batch& micro, const LossContext& ctx) {
    LossResult r;
    r.loss = -(out.log_probs.to(torch::kFloat) * micro.at("loss_mask")).sum() / ctx.global_num_tokens;
    return r;
  };
  compat::cuda_reset_peak_memory();
  std::vector<double> losses, times;
  auto torch_device = torch::Device(device == "cuda" ? torch::kCUDA : torch::kCPU, device == "cuda" ? local_rank : -1);
  // Step k of rank r reads its own mbs x seq window of the token file, as the reference script does.
  auto batch_for_step = [&](int64_t step) {
    const int64_t offset = (step * world + rank) * mbs * seq;
    TORCH_CHECK(offset + mbs * seq <= all.numel(), "token file too short for step ", step);
    auto ids = all.slice(0, offset, offset + mbs * seq).view({mbs, seq}).to(torch_device);
    Batch batch;
    batch.set("input_ids", ids);
    batch.set("attention_mask", torch::ones_like(ids));
    auto mask = torch::ones_like(ids, torch::kFloat);
    mask.select(1, 0).zero_();
    batch.set("loss_mask", mask);
    return batch;
  };
  for (int64_t step = 0; step < warmup + steps; ++step) {
    Batch batch = batch_for_step(step);
    compat::device_synchronize(torch_device);
    auto t0 = std::chrono::steady_clock::now();
    auto result = engine->train_batch(batch, sft);
    const double loss = result.loss.item<double>();  // the step's only host sync, after the step
    compat::device_synchronize(torch_device);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    losses.push_back(loss);
    if (step >= warmup) times.push_back(dt);
    if (rank == 0) std::cerr << "step " << step << " loss " << loss << " " << dt << " s\n";
  }
  if (!profile.empty()) {
#ifdef ENGINERY_BENCH_KINETO
    namespace prof = torch::autograd::profiler;
    using torch::profiler::impl::ActivityType;
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
    Batch batch = batch_for_step(warmup + steps);
    compat::device_synchronize(torch_device);
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
    {
      RECORD_USER_SCOPE("bench::train_batch");
      auto result = engine->train_batch(batch, sft);
      compat::device_synchronize(torch_device);
    }
    auto trace = prof::disableProfiler();
    if (rank == 0) trace->save(profile);
#else
    std::cerr << "--profile: this build has no kineto profiler (CUDA builds only); skipped\n";
#endif
  }
  double total = 0;
  for (double t : times) total += t;
  const double tok_s = static_cast<double>(mbs * seq * world) * static_cast<double>(times.size()) / total;
  nlohmann::json result = {{"impl", "enginery-" + backend}, {"seq", seq}, {"mbs", mbs}, {"ac", ac},
                           {"world", world}, {"steps", steps}, {"tokens_per_s", tok_s},
                           {"mfu", flops_per_token > 0 ? tok_s * flops_per_token / (989e12 * world) : 0.0},
                           {"peak_mem_gib", device == "cuda" ? compat::cuda_peak_allocated_gib() : peak_rss_gib()},
                           {"final_loss", losses.back()}, {"losses", losses}};
  if (rank == 0) {
    std::cout << result.dump() << std::endl;
    if (!out.empty()) std::ofstream(out, std::ios::app) << result.dump() << "\n";
  }
  return 0;
}
