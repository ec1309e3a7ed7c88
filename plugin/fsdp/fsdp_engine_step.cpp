// FSDPEngine: forward_step and forward_backward_batch (DESIGN §3-4): autocast in the stored dtype, the global
// token count all-reduced once, micro-batches with gradient sync on the last one only.
#include <optional>

#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {
namespace {

bool wants_entropy(const Batch& batch) {
  for (const char* key : {"calculate_entropy", "compute_entropy"}) {
    if (batch.has_meta(key)) {
      const auto& v = batch.meta(key);
      if (const bool* b = std::get_if<bool>(&v)) return *b;
    }
  }
  return false;
}

// Target tokens of a batch: loss_mask[:, 1:] (position 0 is never a target, batch.h).
double count_target_tokens(const Batch& batch) {
  if (batch.has("loss_mask")) {
    const auto& m = batch.at("loss_mask");
    return m.size(1) > 1 ? m.narrow(1, 1, m.size(1) - 1).sum().item<double>() : 0.0;
  }
  return 0.0;
}

}  // namespace

std::pair<torch::Tensor, ModelOutput> FSDPEngine::forward_step(const Batch& micro_batch, const LossFn& loss_fn,
                                                                const LossContext& ctx, bool forward_only) {
  if (!model_) throw EngineryError("forward_step before initialize()", "fsdp engine, rank " + std::to_string(args_.rank));
  models::ModelInputs inputs;
  inputs.input_ids = micro_batch.at("input_ids").to(device_);
  inputs.attention_mask = micro_batch.at("attention_mask").to(device_);
  if (micro_batch.has("position_ids")) inputs.position_ids = micro_batch.at("position_ids").to(device_);
  models::HeadOptions head;
  head.compute_entropy = wants_entropy(micro_batch);

  const bool backward = !forward_only && torch::GradMode::is_enabled();
  ModelOutput output;
  {
    // fp32 turns autocast off; the scope clears the autocast cache when it ends.
    RECORD_USER_SCOPE("enginery::forward");
    compat::AutocastScope autocast(device_.type(), autocast_dtype_);
    output = model_->forward(inputs, head, fsdp_.get());
  }
  if (fsdp_ && !backward) fsdp_->after_forward_only();

  torch::Tensor loss;
  if (loss_fn) {
    LossResult result = loss_fn(output, micro_batch.to(device_), ctx);
    loss = result.loss;
    last_metrics_ = std::move(result.metrics);
  } else if (backward) {
    throw EngineryError("a training step needs a loss function", "fsdp engine, rank " + std::to_string(args_.rank));
  }
  if (backward) {
    {
      RECORD_USER_SCOPE("enginery::backward");
      if (fsdp_) fsdp_->before_backward(sync_grads_);
      (scaler_ ? scaler_->scale(loss) : loss).backward();
    }
    RECORD_USER_SCOPE("enginery::after_backward");
    if (fsdp_) fsdp_->after_backward(sync_grads_);
  }
  return {loss, output};
}

BatchOutput FSDPEngine::forward_backward_batch(const Batch& batch, const LossFn& loss_fn, bool forward_only) {
  const int64_t mbs = args_.engine.micro_batch_size_per_gpu;
  if (mbs <= 0) {
    throw EngineryError("micro_batch_size_per_gpu must be positive, got " + std::to_string(mbs),
                        "engine.micro_batch_size_per_gpu", ">= 1");
  }
  std::optional<torch::NoGradGuard> no_grad;
  if (forward_only) no_grad.emplace();
  const std::vector<Batch> micro = batch.split(mbs);
  const double n = static_cast<double>(micro.size());

  // One all-reduce: the global token count, and (sum n, sum n^2) whose Cauchy-Schwarz equality W*sum(n^2) ==
  // (sum n)^2 holds exactly when every rank has the same number of micro-batches.
  auto stats = torch::tensor({count_target_tokens(batch), n, n * n}, torch::TensorOptions().dtype(torch::kDouble));
  stats = stats.to(device_);
  world_collectives().all_reduce(stats);
  stats = stats.cpu();
  const double world = static_cast<double>(args_.world_size);
  const double sum_n = stats[1].item<double>(), sum_n2 = stats[2].item<double>();
  if (world * sum_n2 != sum_n * sum_n) {
    throw EngineryError("ranks have different numbers of micro-batches (this rank: " + std::to_string(micro.size()) +
                            ", mean: " + std::to_string(sum_n / world) + "); every rank must get the same batch size",
                        "fsdp engine, rank " + std::to_string(args_.rank) + ", engine.micro_batch_size_per_gpu");
  }

  BatchOutput out;
  std::map<std::string, std::vector<torch::Tensor>> pieces;
  LossContext ctx;
  ctx.global_num_tokens = stats[0].item<double>();
  ctx.dp_size = args_.world_size;
  ctx.num_micro_batches = static_cast<int64_t>(micro.size());
  for (size_t i = 0; i < micro.size(); ++i) {
    ctx.micro_batch_index = static_cast<int64_t>(i);
    sync_grads_ = i + 1 == micro.size();
    last_metrics_.clear();
    auto [loss, model_out] = forward_step(micro[i], loss_fn, ctx, forward_only);
    if (loss.defined()) out.loss = out.loss.defined() ? out.loss + loss.detach() : loss.detach();
    if (model_out.log_probs.defined()) pieces["log_probs"].push_back(model_out.log_probs.detach());
    if (model_out.entropy.defined()) pieces["entropy"].push_back(model_out.entropy.detach());
    if (model_out.values.defined()) pieces["values"].push_back(model_out.values.detach());
    for (const auto& [name, value] : last_metrics_) {
      auto v = value.detach().to(torch::kDouble) / n;
      out.metrics[name] = out.metrics.count(name) ? out.metrics[name] + v : v;
    }
  }
  sync_grads_ = true;
  for (auto& [name, list] : pieces) out.outputs[name] = torch::cat(list, 0);
  return out;
}

}  // namespace fsdp
}  // namespace enginery
