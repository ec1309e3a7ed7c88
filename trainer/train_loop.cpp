#include "trainer/train_loop.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "host_api/error.h"
#include "trainer/checkpoint_state.h"
#include "trainer/collectives.h"
#include "trainer/dataset.h"
#include "trainer/engine_factory.h"
#include "trainer/evaluator.h"
#include "trainer/losses.h"
#include "trainer/metrics_log.h"

namespace fs = std::filesystem;

namespace enginery {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

c10::intrusive_ptr<c10d::Store> rendezvous(const RankEnv& env) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = true;
  options.timeout = std::chrono::minutes(5);
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

// Everything about evaluation that does not change between evaluations.
struct Evaluation {
  bool enabled = false;
  std::optional<AdditionTask> task;
  std::unique_ptr<Dataset> files;
  int64_t val_size = 0;
};

void print_eval(const EvalResult& r, int64_t step) {
  char buffer[160];
  if (r.has_accuracy) {
    std::snprintf(buffer, sizeof(buffer), "eval step %lld | exact match %.1f%% (%lld/%lld held-out) | val_loss %.4f",
                  static_cast<long long>(step), 100.0 * r.accuracy, static_cast<long long>(r.correct),
                  static_cast<long long>(r.total), r.val_loss);
  } else {
    std::snprintf(buffer, sizeof(buffer), "eval step %lld | val_loss %.4f", static_cast<long long>(step), r.val_loss);
  }
  std::cout << buffer << "\n";
  for (const auto& sample : r.samples) std::cout << "    " << sample << "\n";
  std::cout.flush();
}

}  // namespace

void save_resolved_config(const TrainConfig& config) {
  fs::create_directories(config.output_dir());
  std::ofstream out(fs::path(config.output_dir()) / "config.toml", std::ios::trunc);
  out << to_toml(config);
  if (!out) throw EngineryError("cannot write", (fs::path(config.output_dir()) / "config.toml").string());
}

int run_rank(const TrainConfig& config_in, const RankEnv& env, const std::vector<PluginSearchDir>& plugin_path,
             bool print_config) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  TrainConfig config = config_in;
  const bool lead = env.rank == 0;
  const std::string out_dir = config.output_dir();
  if (lead) fs::create_directories(out_dir);
  if (print_config && lead) {
    std::cout << to_toml(config) << std::flush;
    save_resolved_config(config);
  }

  const std::string device_name = resolve_device(config);
  const torch::Device device = device_name == "cuda" ? torch::Device(torch::kCUDA, env.local_rank) : torch::kCPU;

  // Data first: the step count it implies goes into the optimizer's config.
  auto train = open_dataset(config.data.train_files, "train", config.data.max_length, config.data.digits,
                            config.data.train_size, static_cast<uint64_t>(config.data.seed));
  ShardedSampler sampler(train->size(), config.data.train_batch_size, env.rank, env.world_size,
                         static_cast<uint64_t>(config.data.seed), config.data.shuffle);
  const int64_t total = config.trainer.total_training_steps > 0
                            ? config.trainer.total_training_steps
                            : config.trainer.total_epochs * sampler.steps_per_epoch();
  config.optim.total_training_steps = total;
  const LossFn loss_fn = make_loss(config.loss);
  const auto required = required_inputs(config.loss);

  Evaluation eval;
  eval.enabled = config.trainer.test_freq > 0 && config.model_type() == "language_model";
  if (eval.enabled) {
    if (is_builtin_addition(config.data.train_files) && config.data.val_files.empty()) {
      eval.task.emplace(config.data.digits, static_cast<uint64_t>(config.data.seed));
      eval.val_size = config.data.val_size;
    } else if (!config.data.val_files.empty()) {
      eval.files = open_dataset(config.data.val_files, "val", config.data.max_length, config.data.digits,
                                config.data.val_size, static_cast<uint64_t>(config.data.seed));
    } else {
      eval.enabled = false;
    }
  }

  // Rendezvous, process group, engine.
  auto store = rendezvous(env);
  auto group = device_name == "cuda" ? compat::make_nccl_group(store, static_cast<int>(env.rank),
                                                               static_cast<int>(env.world_size))
                                     : compat::make_gloo_group(store, static_cast<int>(env.rank),
                                                               static_cast<int>(env.world_size));
  EngineRegistry registry;
  const PluginLoadReport report = load_plugins(registry, plugin_path, lead ? &std::cerr : nullptr);
  check_engine_available(registry, report, config, device_name, env.world_size);
  EngineArgs args;
  args.device = device_name;
  args.rank = env.rank;
  args.world_size = env.world_size;
  args.local_rank = env.local_rank;
  args.world_group = group;
  args.store = store;
  args.model = config.model;
  args.engine = config.engine;
  args.optim = config.optim;
  args.checkpoint = config.checkpoint;
  auto engine = create_engine(registry, config, args);
  engine->initialize();
  if (lead) {
    std::cout << "engine: " << config.model_type() << " / " << config.engine.strategy << " on " << device_name
              << " x " << env.world_size << " ranks (" << (device_name == "cuda" ? "NCCL" : "Gloo") << ")\n"
              << "model: " << config.model.path << "\n"
              << "data: " << train->describe() << ", " << sampler.steps_per_epoch() << " steps per epoch\n"
              << "output: " << out_dir << "\n";
  }

  // Resume.
  int64_t start = 0;
  if (config.trainer.resume_mode == "auto") {
    if (auto state = find_latest_checkpoint(out_dir)) {
      if (state->data_seed != config.data.seed || state->train_batch_size != config.data.train_batch_size) {
        throw EngineryError("checkpoint global_step_" + std::to_string(state->global_step) +
                                " was written with data.seed " + std::to_string(state->data_seed) +
                                " and data.train_batch_size " + std::to_string(state->train_batch_size) +
                                "; resuming with other values would not continue the same data order",
                            out_dir, "the seed and batch size it was saved with");
      }
      engine->load_checkpoint(engine_checkpoint_dir(checkpoint_dir(out_dir, state->global_step)));
      start = state->global_step;
      if (lead) {
        std::cout << "resumed from " << checkpoint_dir(out_dir, start) << " (epoch " << state->epoch << ", step "
                  << state->step_in_epoch << " of the epoch)\n";
      }
    } else if (lead) {
      std::cout << "no complete checkpoint in " << out_dir << ": starting from step 0\n";
    }
  }
  std::optional<MetricsLog> metrics;
  if (lead) metrics.emplace(out_dir, start > 0 ? start : -1);

  EvalContext eval_ctx;
  eval_ctx.engine = engine.get();
  eval_ctx.group = group;
  eval_ctx.device = device;
  eval_ctx.rank = env.rank;
  eval_ctx.world_size = env.world_size;
  eval_ctx.rows_per_call = std::max<int64_t>(64, config.engine.micro_batch_size_per_gpu);

  RunSummary summary;
  summary.output_dir = out_dir;
  bool first_eval = true, first_step = true;
  auto run_eval = [&](int64_t step) {
    EvalResult r = eval.task ? evaluate_addition(eval_ctx, *eval.task, eval.val_size)
                             : evaluate_loss(eval_ctx, *eval.files);
    if (!lead) return;
    print_eval(r, step);
    nlohmann::json line = {{"step", step}, {"val_loss", r.val_loss}};
    if (r.has_accuracy) {
      line["accuracy"] = r.accuracy;
      line["correct"] = r.correct;
      line["total"] = r.total;
      summary.has_accuracy = true;
      if (first_eval) summary.first_accuracy = r.accuracy;
      summary.last_accuracy = r.accuracy;
      summary.best_accuracy = std::max(summary.best_accuracy, r.accuracy);
    }
    summary.has_val_loss = true;
    summary.last_val_loss = r.val_loss;
    first_eval = false;
    metrics->write(line);
  };

  if (eval.enabled && config.trainer.val_before_train && start == 0) run_eval(0);

  const auto run_start = Clock::now();
  double train_seconds = 0.0, tokens_done = 0.0;
  for (int64_t step = start + 1; step <= total; ++step) {
    const auto step_start = Clock::now();
    std::vector<Example> examples;
    for (int64_t index : sampler.indices(step - 1)) examples.push_back(train->get(index));
    Batch batch = collate(examples);
    for (const auto& name : required) {
      if (!batch.has(name)) {
        throw EngineryError("loss.type = " + config.loss.type + " needs \"" + name + "\" in every example",
                            config.data.train_files, "per-token arrays in the .jsonl rows");
      }
    }
    BatchOutput out = engine->train_batch(batch, loss_fn);
    const double local_loss = out.loss.defined() ? out.loss.item<double>() : 0.0;
    const auto sums = all_reduce(group,
                                 {local_loss, batch.at("attention_mask").sum().item<double>(),
                                  batch.at("loss_mask").sum().item<double>()},
                                 c10d::ReduceOp::SUM, device);
    const double grad_norm = out.grad_norm.defined() ? out.grad_norm.item<double>() : 0.0;
    const double step_seconds = seconds_since(step_start);
    train_seconds += step_seconds;
    tokens_done += sums[1];
    const double tokens_per_s = train_seconds > 0 ? tokens_done / train_seconds : 0.0;

    if (lead) {
      nlohmann::json line = {{"step", step},
                             {"epoch", sampler.epoch_of(step - 1)},
                             {"loss", sums[0]},
                             {"grad_norm", grad_norm},
                             {"lr", out.lr},
                             {"tokens_per_s", tokens_per_s},
                             {"tokens", sums[1]},
                             {"target_tokens", sums[2]},
                             {"step_time_s", step_seconds}};
      for (const auto& [name, value] : out.metrics) line[name] = value.item<double>();
      metrics->write(line);
      if (first_step) summary.first_loss = sums[0];
      first_step = false;
      summary.last_loss = sums[0];
      summary.steps = step;
      if (step % config.trainer.log_freq == 0 || step == total || step == start + 1) {
        StepLine progress{step, total, sums[0], grad_norm, out.lr, tokens_per_s,
                          train_seconds / static_cast<double>(step - start) * static_cast<double>(total - step)};
        std::cout << format_step(progress) << "\n" << std::flush;
      }
    }

    const bool last = step == total;
    if (eval.enabled && (step % config.trainer.test_freq == 0 || last)) run_eval(step);
    if (config.trainer.save_freq > 0 && (step % config.trainer.save_freq == 0 || last)) {
      // The whole directory is built under a temporary name and published by rank 0 once the engine's files and
      // the data position are on disk (checkpoint_state.h); retention is ours, counting only resumable ones.
      const std::string dir = checkpoint_dir(out_dir, step);
      if (lead) begin_checkpoint(out_dir, step);
      barrier(group, device);
      engine->save_checkpoint(engine_checkpoint_dir(temp_checkpoint_dir(out_dir, step)), step, 0);
      barrier(group, device);  // every rank's engine save returned
      if (lead) {
        TrainerState state{step, sampler.epoch_of(step), step % sampler.steps_per_epoch(), config.data.seed,
                           config.data.train_batch_size};
        commit_checkpoint(out_dir, state, config.trainer.max_ckpt_to_keep);
        ++summary.checkpoints;
        std::cout << "checkpoint saved: " << dir << "\n" << std::flush;
      }
    }
  }
  barrier(group, device);

  if (lead) {
    summary.wall_s = seconds_since(run_start);
    summary.tokens_per_s = train_seconds > 0 ? tokens_done / train_seconds : 0.0;
    const std::string table = format_summary(summary);
    std::cout << "\n" << table << std::flush;
    std::ofstream(fs::path(out_dir) / "summary.txt", std::ios::trunc) << table;
  }
  return 0;
}

}  // namespace enginery
