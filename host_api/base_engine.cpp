#include "host_api/base_engine.h"

#include <optional>

#include "host_api/error.h"
#include "host_api/precision.h"

namespace enginery {
namespace {

// Target tokens of a batch: loss_mask[:, 1:] (position 0 is never a target, batch.h).
double count_target_tokens(const Batch& batch) {
  if (!batch.has("loss_mask")) return 0.0;
  const auto& m = batch.at("loss_mask");
  return m.size(1) > 1 ? m.narrow(1, 1, m.size(1) - 1).sum().item<double>() : 0.0;
}

bool wants_entropy(const Batch& batch) {
  if (!batch.has_meta("calculate_entropy")) return false;
  const bool* on = std::get_if<bool>(&batch.meta("calculate_entropy"));
  if (on == nullptr) throw EngineryError("must be a boolean", "batch metadata 'calculate_entropy'", "true, false");
  return *on;
}

// Adds `value` into `into` (which may be undefined).
void accumulate(torch::Tensor& into, const torch::Tensor& value) { into = into.defined() ? into + value : value; }

}  // namespace

GradScaler::~GradScaler() = default;

BaseEngine::BaseEngine() : precision_(), scaler_(nullptr) {}

BaseEngine::~BaseEngine() = default;

void BaseEngine::set_precision(const Precision& precision, std::unique_ptr<GradScaler> scaler, ScalerMode configured) {
  if (precision.param_dtype == c10::kHalf && !scaler && configured != ScalerMode::kNever) {
    throw EngineryError("fp16 compute needs a grad scaler; an engine may run fp16 unscaled only when the user set "
                        "engine.grad_scaler.enabled = \"never\"",
                        "engine.mixed_precision.param_dtype", "bf16, fp32, or fp16 with a scaler");
  }
  if (scaler && configured == ScalerMode::kNever) {
    throw EngineryError("a grad scaler was installed although the configuration says never",
                        "engine.grad_scaler.enabled", "auto, always");
  }
  precision_ = precision;
  scaler_ = std::move(scaler);
}

BaseEngine::ModeGuard::ModeGuard(BaseEngine* engine, bool previous_training)
    : engine_(engine), previous_training_(previous_training) {}

BaseEngine::ModeGuard::ModeGuard(ModeGuard&& other) noexcept
    : engine_(other.engine_), previous_training_(other.previous_training_) {
  other.engine_ = nullptr;
}

BaseEngine::ModeGuard::~ModeGuard() {
  if (engine_ != nullptr) engine_->set_training(previous_training_);
}

BaseEngine::ModeGuard BaseEngine::train_mode() {
  ModeGuard guard(this, training_);
  set_training(true);
  return guard;
}

BaseEngine::ModeGuard BaseEngine::eval_mode() {
  ModeGuard guard(this, training_);
  set_training(false);
  return guard;
}

BatchOutput BaseEngine::forward_backward_batch(const Batch& batch, const LossFn& loss_fn, bool forward_only) {
  const int64_t mbs = args().engine.micro_batch_size_per_gpu;
  if (mbs <= 0) {
    // Checked here as well as by the parser: engines are also built from code.
    throw EngineryError("must be positive, got " + std::to_string(mbs), "engine.micro_batch_size_per_gpu", ">= 1");
  }
  std::optional<torch::NoGradGuard> no_grad;
  if (forward_only) no_grad.emplace();
  const std::vector<Batch> micro = batch.split(mbs);
  const double n = static_cast<double>(micro.size());

  // One all-reduce: the global token count, and (sum n, sum n^2) whose Cauchy-Schwarz equality W*sum(n^2) ==
  // (sum n)^2 holds exactly when every rank has the same number of micro-batches (so no rank waits forever in a
  // gradient reduction the others never start).
  auto stats = torch::tensor({count_target_tokens(batch), n, n * n}, torch::TensorOptions().dtype(torch::kDouble));
  const int64_t world = get_data_parallel_size();
  if (world > 1) {
    std::vector<torch::Tensor> one{stats.to(device())};
    get_data_parallel_group()->allreduce(one)->wait();
    stats = one[0].cpu();
  }
  const double sum_n = stats[1].item<double>(), sum_n2 = stats[2].item<double>();
  if (static_cast<double>(world) * sum_n2 != sum_n * sum_n) {
    throw EngineryError("ranks have different numbers of micro-batches (this rank: " + std::to_string(micro.size()) +
                            ", mean: " + std::to_string(sum_n / static_cast<double>(world)) +
                            "); every rank must get the same batch size",
                        "rank " + std::to_string(get_data_parallel_rank()) + ", engine.micro_batch_size_per_gpu");
  }

  LossContext ctx;
  ctx.global_num_tokens = stats[0].item<double>();
  ctx.dp_size = world;
  ctx.num_micro_batches = static_cast<int64_t>(micro.size());
  ctx.calculate_entropy = wants_entropy(batch);

  BatchOutput out;
  std::map<std::string, std::vector<torch::Tensor>> pieces;
  for (size_t i = 0; i < micro.size(); ++i) {
    ctx.micro_batch_index = static_cast<int64_t>(i);
    MicroBatchResult r = forward_step(micro[i], loss_fn, ctx, forward_only);
    if (r.loss.defined()) accumulate(out.loss, r.loss.detach());
    for (const auto& [name, t] : {std::pair{"log_probs", r.output.log_probs}, std::pair{"entropy", r.output.entropy},
                                  std::pair{"values", r.output.values}}) {
      if (t.defined()) pieces[name].push_back(t.detach());
    }
    for (const auto& [name, value] : r.metrics) accumulate(out.metrics[name], value.detach().to(torch::kDouble) / n);
  }
  for (auto& [name, list] : pieces) out.outputs[name] = torch::cat(list, 0);
  return out;
}

BatchOutput BaseEngine::train_batch(const Batch& batch, const LossFn& loss_fn) {
  optimizer_zero_grad();
  BatchOutput out = forward_backward_batch(batch, loss_fn, /*forward_only=*/false);
  out.grad_norm = optimizer_step();
  out.lr = lr_scheduler_step();
  return out;
}

BatchOutput BaseEngine::infer_batch(const Batch& batch, const LossFn& loss_fn) {
  auto guard = eval_mode();
  torch::NoGradGuard no_grad;
  return forward_backward_batch(batch, loss_fn, /*forward_only=*/true);
}

}  // namespace enginery
