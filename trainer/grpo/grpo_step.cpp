#include "trainer/grpo/grpo_step.h"
#include "trainer/grpo/progress.h"

#include <chrono>

#include "host_api/error.h"
#include "models/generation.h"
#include "trainer/data/addition_task.h"
#include "trainer/collectives.h"
#include "trainer/grpo/advantages.h"
#include "trainer/grpo/progress.h"
#include "trainer/grpo/rollout_data.h"
#include "trainer/grpo/rollout_settings.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace grpo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const torch::Tensor& output_of(const BatchOutput& out, const std::string& name) {
  auto it = out.outputs.find(name);
  if (it == out.outputs.end() || !it->second.defined()) {
    throw EngineryError("the engine returned no " + name + " from infer_batch", "grpo: old log-probs");
  }
  return it->second;
}

// Where each rank-local sum goes before the SUM all-reduce.
enum Sum : size_t {
  kScore, kRows, kResponseLength, kTruncated, kAdvantageTokens, kEntropy, kResponseTokens, kPromptLength,
  kTokens, kNumSums
};

}  // namespace

GrpoStep::GrpoStep(const TrainConfig& config, BaseEngine& engine, CommGroupPtr group, torch::Device device,
                   int64_t rank, int64_t world_size)
    : config_(config),
      engine_(engine),
      group_(std::move(group)),
      device_(device),
      rank_(rank),
      world_size_(world_size),
      loss_options_(policy_loss_options(config.actor)),
      loss_fn_(make_policy_loss(loss_options_)),
      rollout_(config, device, config.rollout.dtype, "rollout") {
  if (config.actor.ppo_mini_batch_size % world_size != 0) {
    throw EngineryError("actor.ppo_mini_batch_size does not divide over " + std::to_string(world_size) + " ranks",
                        config.where("actor.ppo_mini_batch_size"), "a multiple of the number of ranks");
  }
  if (loss_options_.use_kl) {
    reference_ = std::make_unique<PolicyCopy>(config, device, config.model.override_dtype.value_or(c10::kFloat),
                                              "reference");
  }
}

GrpoStep::Rollout GrpoStep::sample(int64_t step, const std::vector<Example>& examples,
                                   std::map<std::string, double>& timing) {
  auto t = Clock::now();
  // verl's colocated order: the weights leave in eval mode, then (offload_outside_modes) the state waits on the
  // host while the sampler generates.
  guard_collective("grpo: the actor's weight stream at step " + std::to_string(step), rank_, [&] {
    auto mode = eval_mode(engine_);
    rollout_.load_from(engine_);
  });
  timing["timing_s/update_weights"] = seconds_since(t);

  t = Clock::now();
  std::vector<Prompt> prompts;
  for (const Example& e : examples) prompts.push_back(prompt_of(e, config_.data.train_files));
  const int64_t n = config_.rollout.n;
  const PromptBatch prompt_batch = repeat_prompts(prompts, n, AdditionTask::kPad);
  models::SamplingParams params = rollout_sampling_params(config_);
  params.eos_token_id = AdditionTask::kEos;
  params.pad_token_id = AdditionTask::kPad;
  params.seed = rollout_seed(config_.data.seed, rank_, step);
  const models::GenerationResult gen = models::generate(rollout_.model(), prompt_batch.ids.to(device_),
                                                        prompt_batch.mask.to(device_), params);
  timing["timing_s/gen"] = seconds_since(t);

  t = Clock::now();
  Rollout r;
  r.scores = score_responses(gen, prompts, n);
  r.advantages = group_advantages(r.scores, n, config_.algorithm.norm_adv_by_std_in_grpo).to(torch::kDouble);
  r.response_lengths = gen.response_lengths.to(torch::kCPU, torch::kDouble);
  r.prompt_lengths = prompt_batch.mask.sum(1).to(torch::kDouble);
  r.batch = rollout_batch(gen);
  // verl's meta_info["temperature"]: the old, reference and new log-probs are those of the distribution sampled
  // from, so the PPO ratio and the KL compare like with like (the engine's head and PolicyCopy read it).
  r.batch.set_meta("temperature", config_.rollout.temperature);
  const torch::Tensor& mask = r.batch.at("loss_mask");
  r.batch.set("advantages", r.advantages.to(device_, torch::kFloat).unsqueeze(1) * mask);
  timing["timing_s/reward"] = seconds_since(t);
  return r;
}

void GrpoStep::add_log_probs(Rollout& r, std::map<std::string, double>& timing, std::vector<double>& sums) {
  auto t = Clock::now();
  Batch& b = r.batch;
  const torch::Tensor& mask = b.at("loss_mask");
  // verl's actor/entropy is measured here, on the rollout's tokens before the update.
  b.set_meta("calculate_entropy", true);
  const BatchOutput out = guard_collective("grpo: old log-probs (engine infer_batch)", rank_,
                                           [&] { return infer_batch(engine_, b); });
  b.set("old_log_probs", output_of(out, "log_probs").detach().to(torch::kFloat));
  sums[kEntropy] = (output_of(out, "entropy").to(torch::kDouble) * mask.to(torch::kDouble)).sum().item<double>();
  b.set_meta("calculate_entropy", loss_options_.entropy_coeff != 0.0);
  timing["timing_s/old_log_prob"] = seconds_since(t);
  if (reference_) {
    t = Clock::now();
    b.set("ref_log_probs", reference_->log_probs(b, config_.engine.micro_batch_size_per_gpu).to(device_));
    timing["timing_s/ref"] = seconds_since(t);
  }
}

std::map<std::string, double> GrpoStep::update(const Batch& batch, const std::string& at_step) {
  const int64_t rows = mini_batch_rows_per_rank(config_, world_size_);
  std::map<std::string, double> sums;
  double lr = 0.0;
  int64_t updates = 0;
  auto mode = train_mode(engine_);
  for (int64_t epoch = 0; epoch < config_.actor.ppo_epochs; ++epoch) {
    for (const Batch& mini : batch.split(rows)) {
      const BatchOutput out = guard_collective("grpo: engine train_batch" + at_step, rank_,
                                               [&] { return train_batch(engine_, mini, loss_fn_); });
      for (const auto& [name, value] : out.metrics) sums["actor/" + name] += value.item<double>();
      sums["actor/grad_norm"] += out.grad_norm.defined() ? out.grad_norm.item<double>() : 0.0;
      lr = out.lr;
      ++updates;
    }
  }
  for (auto& entry : sums) entry.second /= static_cast<double>(std::max<int64_t>(updates, 1));
  sums["actor/lr"] = lr;  // the lr of the next update, as train_batch reports it
  return sums;
}

// Every rank's sums and extremes over the world group, then verl's metric names (token means where verl's are).
std::map<std::string, double> GrpoStep::reduce(const Rollout& r, std::vector<double> sums,
                                               std::map<std::string, double> update, const std::string& at_step) {
  sums[kScore] = r.scores.sum().item<double>();
  sums[kRows] = static_cast<double>(r.scores.size(0));
  sums[kResponseLength] = r.response_lengths.sum().item<double>();
  sums[kTruncated] = (r.response_lengths >= static_cast<double>(config_.rollout.response_length)).sum().item<double>();
  sums[kAdvantageTokens] = (r.advantages * r.response_lengths).sum().item<double>();
  sums[kResponseTokens] = r.response_lengths.sum().item<double>();
  sums[kPromptLength] = r.prompt_lengths.sum().item<double>();
  sums[kTokens] = r.batch.at("attention_mask").sum().item<double>();
  for (const auto& entry : update) sums.push_back(entry.second);  // same keys, same order on every rank
  const auto total =
      all_reduce(group_, sums, c10d::ReduceOp::SUM, device_, "grpo: all-reduce of the step sums" + at_step);
  const auto most = all_reduce(group_,
                               {r.scores.max().item<double>(), -r.scores.min().item<double>(),
                                r.response_lengths.max().item<double>(), -r.response_lengths.min().item<double>(),
                                r.advantages.max().item<double>(), -r.advantages.min().item<double>()},
                               c10d::ReduceOp::MAX, device_, "grpo: all-reduce of the step extremes" + at_step);
  const double rows = std::max(total[kRows], 1.0);
  const double tokens = std::max(total[kResponseTokens], 1.0);
  std::map<std::string, double> m;
  m["critic/score/mean"] = m["critic/rewards/mean"] = total[kScore] / rows;
  m["critic/score/max"] = m["critic/rewards/max"] = most[0];
  m["critic/score/min"] = m["critic/rewards/min"] = -most[1];
  m["critic/advantages/mean"] = total[kAdvantageTokens] / tokens;
  m["critic/advantages/max"] = most[4];
  m["critic/advantages/min"] = -most[5];
  m["response_length/mean"] = total[kResponseLength] / rows;
  m["response_length/max"] = most[2];
  m["response_length/min"] = -most[3];
  m["response_length/clip_ratio"] = total[kTruncated] / rows;
  m["prompt_length/mean"] = total[kPromptLength] / rows;
  m["actor/entropy"] = total[kEntropy] / tokens;
  m["total_tokens"] = total[kTokens];
  size_t i = kNumSums;
  for (const auto& entry : update) m[entry.first] = total[i++] / static_cast<double>(world_size_);
  return m;
}

StepRecord GrpoStep::run(int64_t step, const std::vector<Example>& examples) {
  const auto start = Clock::now();
  const std::string at_step = " at step " + std::to_string(step);
  std::map<std::string, double> timing;
  Rollout rollout = sample(step, examples, timing);
  std::vector<double> sums(kNumSums, 0.0);
  add_log_probs(rollout, timing, sums);
  auto t = Clock::now();
  std::map<std::string, double> updated = update(rollout.batch, at_step);
  timing["timing_s/update_actor"] = seconds_since(t);
  StepRecord r;
  r.metrics = reduce(rollout, std::move(sums), std::move(updated), at_step);
  r.tokens = r.metrics["total_tokens"];
  r.metrics.erase("total_tokens");
  timing["timing_s/step"] = seconds_since(start);
  for (const auto& entry : timing) r.metrics[entry.first] = entry.second;  // rank 0's clock, as verl's driver
  r.seconds = r.metrics.at("timing_s/step");
  r.loss = r.metrics.count("actor/pg_loss") ? r.metrics.at("actor/pg_loss") : 0.0;
  r.grad_norm = r.metrics.at("actor/grad_norm");
  r.lr = r.metrics.at("actor/lr");
  return r;
}

std::string GrpoStep::progress_line(const StepProgress& at, const StepRecord& r) const {
  return format_progress(at.step, at.total, r.metrics, at.eta_s);
}

}  // namespace grpo
}  // namespace enginery
