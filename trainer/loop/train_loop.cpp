#include "trainer/loop/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "host_api/error.h"
#include "launch/rendezvous.h"
#include "launch/world_group.h"
#include "support/durable_fs.h"
#include "trainer/loop/checkpoint_state.h"
#include "trainer/collectives.h"
#include "trainer/data/dataset.h"
#include "trainer/engine_factory.h"
#include "trainer/loop/evaluator.h"
#include "trainer/grpo/grpo_step.h"
#include "trainer/grpo/rollout_settings.h"
#include "trainer/grpo/step_plan.h"
#include "trainer/loop/sft_step.h"
#include "trainer/loop/losses.h"
#include "trainer/loop/metrics_log.h"
#include "trainer/preflight.h"
#include "engine_driver/mode_guard.h"

namespace fs = std::filesystem;

namespace enginery {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The training data, how this rank walks it, and the loss every step applies.
struct TrainInputs {
  std::unique_ptr<Dataset> train;
  ShardedSampler sampler;
  int64_t total = 0;  // steps of the whole run
  LossFn loss_fn;
  std::vector<std::string> required;  // per-token inputs the loss reads from every batch
};

// Data first: the step count it implies goes into the optimizer's config.
TrainInputs open_train_inputs(TrainConfig& config, const RankEnv& env, const TokenLimits& limits) {
  auto train = open_dataset(config.data.train_files, "train", config.data.max_length, config.data.digits,
                            config.data.train_size, static_cast<uint64_t>(config.data.seed), limits,
                            jsonl_options(config, "train"));
  ShardedSampler sampler(train->size(), config.data.train_batch_size, env.rank, env.world_size,
                         static_cast<uint64_t>(config.data.seed), config.data.shuffle);
  const int64_t total = config.trainer.total_training_steps > 0
                            ? config.trainer.total_training_steps
                            : config.trainer.total_epochs * sampler.steps_per_epoch();
  // The LR schedule counts optimizer steps: GRPO takes several per trainer step (its mini-batches and epochs).
  config.optim.total_training_steps = total * grpo::optimizer_steps_per_step(config);
  LossFn loss_fn = make_loss(config.loss);
  auto required = required_inputs(config.loss);
  return TrainInputs{std::move(train), std::move(sampler), total, std::move(loss_fn), std::move(required)};
}

// Everything about evaluation that does not change between evaluations.
struct Evaluation {
  bool enabled = false;
  std::optional<AdditionTask> task;
  std::unique_ptr<Dataset> files;
  int64_t val_size = 0;
};

Evaluation open_evaluation(const TrainConfig& config, const TokenLimits& limits) {
  Evaluation eval;
  eval.enabled = config.trainer.test_freq > 0 && config.model_type() == "language_model";
  if (eval.enabled) {
    if (is_builtin_addition(config.data.train_files) && config.data.val_files.empty()) {
      eval.task.emplace(config.data.digits, static_cast<uint64_t>(config.data.seed));
      eval.val_size = config.data.val_size;
    } else if (!config.data.val_files.empty()) {
      eval.files = open_dataset(config.data.val_files, "val", config.data.max_length, config.data.digits,
                                config.data.val_size, static_cast<uint64_t>(config.data.seed), limits,
                                jsonl_options(config, "val"));
    } else {
      eval.enabled = false;
    }
  }
  return eval;
}

// The engine and what it runs on: the world group over the rendezvous store, and the registry whose plugin
// libraries hold the engine's code (declared first, so it outlives the engine).
struct RankEngine {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CommGroup> group;
  EngineRegistry registry;
  std::shared_ptr<BaseEngine> engine;
};

// Rendezvous, process group, engine.
void build_engine(RankEngine& out, const TrainConfig& config, const RankEnv& env, const std::string& device_name,
                  const std::vector<PluginSearchDir>& plugin_path) {
  const bool lead = env.rank == 0;
  // Plugins first: the loader forks a probe process per plugin, best done before the process group starts threads.
  const PluginLoadReport report = load_plugins(out.registry, plugin_path, lead ? &std::cerr : nullptr);
  check_engine_available(out.registry, report, config, device_name, env.world_size);
  const auto timeout = collective_timeout(config.trainer.collective_timeout_s);
  RendezvousOptions rendezvous;
  rendezvous.timeout = collective_timeout(config.trainer.rendezvous_timeout_s);
  rendezvous.op_timeout = timeout;
  rendezvous.setting = "trainer.rendezvous_timeout_s";
  // A rank torchrun or srun started says what it waits for; our launcher's ranks start together, watched by it.
  if (!env.spawned_locally) rendezvous.progress = &std::cout;
  out.store = join_rendezvous(env, rendezvous);
  // Every rank has checked in; a peer lost between here and the group's own handshake is bounded like a collective.
  out.group = guard_collective("creating the " + std::string(world_group_backend(device_name)) + " world group",
                               env.rank, [&] {
                                 return make_world_group(out.store, env.rank, env.world_size, device_name, timeout);
                               });
  if (lead && env.world_size > 1) {
    std::cout << collective_wait_line(env.world_size, device_name, timeout, "trainer.collective_timeout_s") << "\n";
  }
  EngineArgs args;
  args.device = device_name;
  args.rank = env.rank;
  args.world_size = env.world_size;
  args.local_rank = env.local_rank;
  args.world_group = out.group;
  args.store = out.store;
  set_engine_settings(args, config);
  out.engine = create_engine(out.registry, config, args);
  out.engine->initialize();
}

void print_banner(const TrainConfig& config, const RankEnv& env, const std::string& device_name,
                  const TrainInputs& inputs, const std::string& out_dir) {
  std::cout << "engine: " << config.model_type() << " / " << config.engine.strategy << " on " << device_name
            << " x " << env.world_size << " ranks (" << world_group_backend(device_name) << ")\n"
            << "model: " << config.model.path << "\n"
            << "data: " << inputs.train->describe() << ", " << inputs.sampler.steps_per_epoch() << " steps per epoch\n"
            << "output: " << out_dir << "\n";
  if (config.is_grpo()) {
    std::cout << "algorithm: grpo, " << config.rollout.n << " responses per prompt, "
              << grpo::optimizer_steps_per_step(config) << " optimizer steps per step\n";
  }
}

// With resume_mode "auto": loads the newest complete checkpoint and returns its step; else 0. A newer checkpoint
// that cannot be resumed is an error (checkpoint_state.h); older ones are named in a warning.
int64_t resume(const TrainConfig& config, BaseEngine& engine, const std::string& out_dir, int64_t rank) {
  if (config.trainer.resume_mode != "auto") return 0;
  const bool lead = rank == 0;
  std::vector<UnusableCheckpoint> older;
  auto state = checkpoint_to_resume(out_dir, older);
  for (const auto& u : older) {
    if (lead) std::cerr << "warning: checkpoint " << u.dir << " cannot be resumed (" << u.reason << "); skipped\n";
  }
  if (!state) {
    if (lead) std::cout << "no complete checkpoint in " << out_dir << ": starting from step 0\n";
    return 0;
  }
  if (state->data_seed != config.data.seed || state->train_batch_size != config.data.train_batch_size) {
    throw EngineryError("checkpoint global_step_" + std::to_string(state->global_step) +
                            " was written with data.seed " + std::to_string(state->data_seed) +
                            " and data.train_batch_size " + std::to_string(state->train_batch_size) +
                            "; resuming with other values would not continue the same data order",
                        out_dir, "the seed and batch size it was saved with");
  }
  const std::string dir = checkpoint_dir(out_dir, state->global_step);
  // Loading writes every part of the state: in train mode, which brings it all (offload_outside_modes).
  guard_collective("engine load_checkpoint of " + dir, rank, [&] {
    auto mode = train_mode(engine);
    engine.load_checkpoint(engine_checkpoint_dir(dir));
  });
  const int64_t start = state->global_step;
  if (lead) {
    std::cout << "resumed from " << checkpoint_dir(out_dir, start) << " (epoch " << state->epoch << ", step "
              << state->step_in_epoch << " of the epoch)\n";
  }
  return start;
}

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
  const std::string failed = nonfinite_note(r);
  if (!failed.empty()) std::cerr << "warning: eval step " << step << ": " << failed << "\n" << std::flush;
}

// The loop from the step after `start` to the last: one algorithm step (trainer/loop/training_step.h) per step,
// rank 0's metrics line and progress line for either, evaluations and checkpoints at their frequencies, and the
// summary at the end.
class TrainingLoop {
 public:
  TrainingLoop(const TrainConfig& config, const RankEnv& env, TrainInputs& inputs, const Evaluation& eval,
               const RankEngine& engine, torch::Device device, std::string out_dir, int64_t start);
  void run();

 private:
  void evaluate(int64_t step);
  void train_step(int64_t step);
  void record_step(int64_t step, const StepRecord& record);
  void save_checkpoint(int64_t step);
  void write_summary();

  const TrainConfig& config_;
  const int64_t rank_;
  const bool lead_;
  TrainInputs& inputs_;
  const Evaluation& eval_;
  BaseEngine& engine_;
  c10::intrusive_ptr<compat::CommGroup> group_;
  torch::Device device_;
  const std::string out_dir_;
  const int64_t start_;
  std::optional<MetricsLog> metrics_;
  std::unique_ptr<TrainingStep> step_;  // SFT, or GRPO with algorithm.adv_estimator = grpo
  EvalContext eval_ctx_;
  RunSummary summary_;
  bool first_eval_ = true;
  bool first_step_ = true;
  double train_seconds_ = 0.0;
  double tokens_done_ = 0.0;
};

TrainingLoop::TrainingLoop(const TrainConfig& config, const RankEnv& env, TrainInputs& inputs,
                           const Evaluation& eval, const RankEngine& engine, torch::Device device,
                           std::string out_dir, int64_t start)
    : config_(config),
      rank_(env.rank),
      lead_(env.rank == 0),
      inputs_(inputs),
      eval_(eval),
      engine_(*engine.engine),
      group_(engine.group),
      device_(device),
      out_dir_(std::move(out_dir)),
      start_(start) {
  if (lead_) metrics_.emplace(out_dir_, start_ > 0 ? start_ : -1);
  eval_ctx_.engine = &engine_;
  eval_ctx_.group = group_;
  eval_ctx_.device = device_;
  eval_ctx_.rank = env.rank;
  eval_ctx_.world_size = env.world_size;
  eval_ctx_.rows_per_call = std::max<int64_t>(64, config_.engine.micro_batch_size_per_gpu);
  if (config_.is_grpo()) {
    step_ = std::make_unique<grpo::GrpoStep>(config_, engine_, group_, device_, env.rank, env.world_size);
  } else {
    step_ = std::make_unique<SftStep>(config_, engine_, group_, device_, env.rank, inputs_.loss_fn, inputs_.required);
  }
  summary_.output_dir = out_dir_;
}

void TrainingLoop::evaluate(int64_t step) {
  EvalResult r = eval_.task ? evaluate_addition(eval_ctx_, *eval_.task, eval_.val_size)
                            : evaluate_loss(eval_ctx_, *eval_.files);
  if (!lead_) return;
  print_eval(r, step);
  nlohmann::json line = {{"step", step}, {"val_loss", r.val_loss}};
  if (r.nonfinite > 0) line["nonfinite_sequences"] = r.nonfinite;  // val_loss is NaN: written as null
  if (r.has_accuracy) {
    line["accuracy"] = r.accuracy;
    line["correct"] = r.correct;
    line["total"] = r.total;
    summary_.has_accuracy = true;
    if (first_eval_) summary_.first_accuracy = r.accuracy;
    summary_.last_accuracy = r.accuracy;
    summary_.best_accuracy = std::max(summary_.best_accuracy, r.accuracy);
  }
  summary_.has_val_loss = true;
  summary_.last_val_loss = r.val_loss;
  first_eval_ = false;
  metrics_->write(line);
}

void TrainingLoop::train_step(int64_t step) {
  std::vector<Example> examples;
  for (int64_t index : inputs_.sampler.indices(step - 1)) examples.push_back(inputs_.train->get(index));
  const StepRecord record = step_->run(step, examples);
  train_seconds_ += record.seconds;
  tokens_done_ += record.tokens;
  if (lead_) record_step(step, record);
}

// Rank 0: the step's metrics line, the summary's running values, and the progress line at log_freq.
void TrainingLoop::record_step(int64_t step, const StepRecord& r) {
  const int64_t total = inputs_.total;
  const double tokens_per_s = train_seconds_ > 0 ? tokens_done_ / train_seconds_ : 0.0;
  nlohmann::json line = {{"step", step},
                         {"epoch", inputs_.sampler.epoch_of(step - 1)},
                         {"loss", r.loss},
                         {"grad_norm", r.grad_norm},
                         {"lr", r.lr},
                         {"tokens", r.tokens},
                         {"tokens_per_s", tokens_per_s},
                         {"step_time_s", r.seconds}};
  for (const auto& [name, value] : r.metrics) line[name] = value;
  metrics_->write(line);
  if (first_step_) summary_.first_loss = r.loss;
  first_step_ = false;
  summary_.last_loss = r.loss;
  summary_.steps = step;
  if (step % config_.trainer.log_freq == 0 || step == total || step == start_ + 1) {
    const double eta = train_seconds_ / static_cast<double>(step - start_) * static_cast<double>(total - step);
    std::cout << step_->progress_line(StepProgress{step, total, tokens_per_s, eta}, r) << "\n" << std::flush;
  }
}

// The whole directory is built under a temporary name and published by rank 0 once the engine's files and the
// data position are on disk (checkpoint_state.h); retention is ours, counting only resumable ones.
void TrainingLoop::save_checkpoint(int64_t step) {
  const std::string dir = checkpoint_dir(out_dir_, step);
  const std::string at_step = " at step " + std::to_string(step);
  if (lead_) begin_checkpoint(out_dir_, step);
  barrier(group_, device_, "barrier before the checkpoint" + at_step);
  guard_collective("engine save_checkpoint" + at_step, rank_, [&] {
    auto mode = train_mode(engine_);  // a checkpoint reads every part of the state
    engine_.save_checkpoint(engine_checkpoint_dir(temp_checkpoint_dir(out_dir_, step)), step, 0);
  });
  barrier(group_, device_, "barrier after the checkpoint" + at_step);  // every rank's engine save returned
  if (lead_) {
    const ShardedSampler& sampler = inputs_.sampler;
    TrainerState state{step, sampler.epoch_of(step), step % sampler.steps_per_epoch(), config_.data.seed,
                       config_.data.train_batch_size};
    metrics_->sync();  // the metrics up to a checkpoint survive with it
    for (const auto& u : commit_checkpoint(out_dir_, state, config_.trainer.max_ckpt_to_keep)) {
      std::cerr << "warning: retention keeps " << u.dir << ", which it cannot read (" << u.reason << ")\n";
    }
    ++summary_.checkpoints;
    std::cout << "checkpoint saved: " << dir << "\n" << std::flush;
  }
}

void TrainingLoop::run() {
  if (eval_.enabled && config_.trainer.val_before_train && start_ == 0) evaluate(0);
  const auto run_start = Clock::now();
  const int64_t total = inputs_.total;
  for (int64_t step = start_ + 1; step <= total; ++step) {
    train_step(step);
    const bool last = step == total;
    if (eval_.enabled && (step % config_.trainer.test_freq == 0 || last)) evaluate(step);
    if (config_.trainer.save_freq > 0 && (step % config_.trainer.save_freq == 0 || last)) save_checkpoint(step);
  }
  barrier(group_, device_, "barrier at the end of the run");
  if (lead_) {
    summary_.wall_s = seconds_since(run_start);
    write_summary();
  }
}

void TrainingLoop::write_summary() {
  summary_.tokens_per_s = train_seconds_ > 0 ? tokens_done_ / train_seconds_ : 0.0;
  const std::string table = format_summary(summary_);
  metrics_->sync();
  durable::write_file(fs::path(out_dir_) / "summary.txt", table);  // checked: a failed write fails the run
  std::cout << "\n" << table << std::flush;
}

}  // namespace

void save_resolved_config(const TrainConfig& config) {
  fs::create_directories(config.output_dir());
  durable::replace_file(fs::path(config.output_dir()) / "config.toml", to_toml(config));
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
  refuse_sequence_parallel(config);  // under torchrun or srun no launcher ran preflight_data
  const TokenLimits limits = model_token_limits(config);
  TrainInputs inputs = open_train_inputs(config, env, limits);
  // Under torchrun or srun no launcher ran preflight: the rollout is checked here, before anything is allocated.
  if (config.is_grpo()) check_rollout_settings(config, *inputs.train, limits, device);
  const Evaluation eval = open_evaluation(config, limits);
  RankEngine engine;
  build_engine(engine, config, env, device_name, plugin_path);
  if (lead) print_banner(config, env, device_name, inputs, out_dir);
  const int64_t start = resume(config, *engine.engine, out_dir, env.rank);
  TrainingLoop(config, env, inputs, eval, engine, device, out_dir, start).run();
  // As torch.distributed.destroy_process_group() ends a Python run: the engine (and any subgroup it built) first,
  // then the world group, so NCCL's communicators close in order rather than in the group's destructor, which
  // warns at every exit that destroy_process_group() was not called. Only after a run that finished: a rank that
  // failed may have peers still inside a collective.
  engine.engine.reset();
  engine.group->shutdown();
  return 0;
}

}  // namespace enginery
