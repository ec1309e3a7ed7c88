#include "trainer/loop/sft_step.h"

#include <chrono>
#include <utility>

#include "engine_driver/mode_guard.h"
#include "engine_driver/step_loop.h"
#include "host_api/error.h"
#include "trainer/collectives.h"
#include "trainer/loop/metrics_log.h"

namespace enginery {

SftStep::SftStep(const TrainConfig& config, BaseEngine& engine, CommGroupPtr group, torch::Device device,
                 int64_t rank, LossFn loss_fn, std::vector<std::string> required)
    : config_(config),
      engine_(engine),
      group_(std::move(group)),
      device_(device),
      rank_(rank),
      loss_fn_(std::move(loss_fn)),
      required_(std::move(required)) {}

StepRecord SftStep::run(int64_t step, const std::vector<Example>& examples) {
  const auto start = std::chrono::steady_clock::now();
  Batch batch = collate(examples);
  for (const auto& name : required_) {
    if (!batch.has(name)) {
      throw EngineryError("loss.type = " + config_.loss.type + " needs \"" + name + "\" in every example",
                          config_.data.train_files, "per-token arrays in the .jsonl rows");
    }
  }
  const std::string at_step = " at step " + std::to_string(step);
  BatchOutput out = guard_collective("engine train_batch" + at_step, rank_, [&] {
    auto mode = train_mode(engine_);
    return train_batch(engine_, batch, loss_fn_);
  });
  const double local_loss = out.loss.defined() ? out.loss.item<double>() : 0.0;
  const auto sums = all_reduce(group_,
                               {local_loss, batch.at("attention_mask").sum().item<double>(),
                                batch.at("loss_mask").sum().item<double>()},
                               c10d::ReduceOp::SUM, device_, "all-reduce of the step metrics" + at_step);
  StepRecord r;
  r.loss = sums[0];
  r.grad_norm = out.grad_norm.defined() ? out.grad_norm.item<double>() : 0.0;
  r.lr = out.lr;
  r.tokens = sums[1];
  r.metrics["target_tokens"] = sums[2];
  for (const auto& [name, value] : out.metrics) r.metrics[name] = value.item<double>();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string SftStep::progress_line(const StepProgress& at, const StepRecord& r) const {
  return format_step(StepLine{at.step, at.total, r.loss, r.grad_norm, r.lr, at.tokens_per_s, at.eta_s});
}

}  // namespace enginery
