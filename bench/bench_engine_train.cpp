// One training step of the fsdp2 engine, timed: the C++ side of the comparison with PyTorch FSDP2 + transformers
// (bench/gpu/run_gpu_bench.sh). Loads the engine through the plugin registry exactly as the host does, feeds the
// same token file as the reference script, and prints one JSON line: tokens/s, MFU, peak memory, loss per step.
//
// Ranks: world size 1 by default; RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun --no-python) for more.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "bench/bench_common.h"
#include "support/torch_compat.h"

#if defined(ENGINERY_WITH_CUDA) && __has_include(<torch/csrc/autograd/profiler_kineto.h>)
#include <torch/csrc/autograd/profiler_kineto.h>
#include "engine_driver/step_loop.h"
#define ENGINERY_BENCH_KINETO 1
#endif

int main(int argc, char** argv) {
  using namespace enginery;
  CLI::App app{"enginery engine step benchmark"};
  bench::EngineFlags flags;
  std::string tokens_file;
  int64_t seq = 4096;
  double flops_per_token = 0.0;
  bench::add_engine_flags(app, flags);
  app.add_option("--tokens", tokens_file, "int32 token file (nanoGPT .bin layout), as the reference reads")->required();
  app.add_option("--seq", seq);
  app.add_option("--flops-per-token", flops_per_token, "model FLOPs per token for MFU (the reference prints it)");
  int64_t micro_batches = 1;
  app.add_option("--micro-batches", micro_batches,
                 "micro-batches per step (gradient accumulation): each step trains micro_batches x mbs rows")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  int64_t ulysses = 1;
  app.add_option("--ulysses", ulysses,
                 "engine.<backend>.ulysses_sequence_parallel_size (with model.use_remove_padding): groups of this "
                 "many ranks share each row, as verl feeds them")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  std::string profile;
  app.add_option("--profile", profile, "after the timed steps, profile one more step (CUDA builds: kineto) and "
                 "write its chrome trace here (bench/gpu/profile_summary.py reads it)");
  CLI11_PARSE(app, argc, argv);

  const bench::Rank me = bench::join_world(flags.device);
  const int64_t rank = me.env.rank, world = me.env.world_size, mbs = flags.mbs;
  const int64_t rows = mbs * micro_batches;  // per rank and step; the engine splits them into micro-batches of mbs
  EngineArgs args = bench::engine_args(me, flags);
  if (ulysses > 1) {
    args.engine.backend_options["ulysses_sequence_parallel_size"] = static_cast<int64_t>(ulysses);
    args.model.use_remove_padding = true;
  }
  auto engine = bench::load_engine(flags, args);
  // The ranks of a Ulysses group read the same rows: data goes by data-parallel rank (world / ulysses of them).
  const int64_t dp_rank = engine->get_data_parallel_rank(), dp_size = engine->get_data_parallel_size();

  // Same tokens as the reference: row r of step s is tokens[((s * dp_size + dp_rank) * rows + r) * seq ...].
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
  const torch::Device torch_device = me.device;
  // Step k of data-parallel rank r reads its own rows x seq window of the token file, as the reference scripts do.
  auto batch_for_step = [&](int64_t step) {
    const int64_t offset = (step * dp_size + dp_rank) * rows * seq;
    TORCH_CHECK(offset + rows * seq <= all.numel(), "token file too short for step ", step);
    auto ids = all.slice(0, offset, offset + rows * seq).view({rows, seq}).to(torch_device);
    Batch batch;
    batch.set("input_ids", ids);
    batch.set("attention_mask", torch::ones_like(ids));
    auto mask = torch::ones_like(ids, torch::kFloat);
    mask.select(1, 0).zero_();
    batch.set("loss_mask", mask);
    return batch;
  };
  const bench::StepLog log = bench::run_steps(*engine, batch_for_step, sft, flags.warmup, flags.steps, rank);
  if (!profile.empty()) {
#ifdef ENGINERY_BENCH_KINETO
    namespace prof = torch::autograd::profiler;
    using torch::profiler::impl::ActivityType;
    const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
    const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
    Batch batch = batch_for_step(flags.warmup + flags.steps);
    compat::device_synchronize(torch_device);
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
    {
      RECORD_USER_SCOPE("bench::train_batch");
      auto result = train_batch(*engine, batch, sft);
      compat::device_synchronize(torch_device);
    }
    auto trace = prof::disableProfiler();
    if (rank == 0) trace->save(profile);
#else
    std::cerr << "--profile: this build has no kineto profiler (CUDA builds only); skipped\n";
#endif
  }
  const double tok_s = static_cast<double>(rows * seq * dp_size) / bench::mean(log.seconds);
  const std::string offload = flags.param_offload && flags.optimizer_offload ? "+offload"
                              : flags.param_offload                          ? "+param_offload"
                              : flags.optimizer_offload                      ? "+optimizer_offload"
                                                                             : "";
  const std::string where = flags.offload_step.empty() ? "" : "(step on " + flags.offload_step + ")";
  const std::string fp8 = flags.fp8.empty() || flags.fp8 == "off" ? "" : "+fp8-" + flags.fp8;
  // A policy other than recomputing whole layers is part of the row's name: the references have only that one.
  const std::string ac_policy = flags.ac && flags.ac_policy != "layer" ? "+ac-" + flags.ac_policy : "";
  const std::string sp = ulysses > 1 ? "+ulysses" + std::to_string(ulysses) : "";
  nlohmann::json result = {{"impl", "enginery-" + flags.backend + offload + where + fp8 + ac_policy + sp}, {"seq", seq},
                           {"ulysses", ulysses},
                           {"mbs", mbs}, {"micro_batches", micro_batches},
                           {"ac", flags.ac}, {"ac_policy", flags.ac ? flags.ac_policy : "off"},
                           {"world", world}, {"steps", flags.steps}, {"tokens_per_s", tok_s},
                           {"mfu", flops_per_token > 0 ? tok_s * flops_per_token / (989e12 * world) : 0.0},
                           {"peak_mem_gib", bench::peak_memory_gib(flags.device)},
                           {"peak_host_gib", bench::peak_memory_gib("cpu")},
                           {"final_loss", log.losses.back()}, {"losses", log.losses}};
  bench::report(result, rank, flags.out);
  return 0;
}
