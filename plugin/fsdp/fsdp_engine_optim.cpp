// FSDPEngine: the optimizer step (docs/ARCHITECTURE.md, "Precision"): unscale -> global grad-norm clip -> step or skip -> scaler update.
#include <iostream>

#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {
namespace {

// fp32 [n]: the 2-norm of each gradient, accumulated in fp32.
torch::Tensor grad_norms(const std::vector<torch::Tensor>& grads) {
  bool all_fp32 = true;
  for (const auto& g : grads) all_fp32 = all_fp32 && g.scalar_type() == torch::kFloat;
  if (all_fp32) return torch::stack(at::_foreach_norm(grads, 2));
  std::vector<torch::Tensor> norms;
  for (const auto& g : grads) norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, torch::kFloat));
  return torch::stack(norms);
}

}  // namespace

void FSDPEngine::optimizer_zero_grad() {
  // The released gradient takes the master shard's device: both must be home.
  require_resident("optimizer_zero_grad", /*model=*/true, /*optimizer=*/false, /*grad=*/true);
  if (fsdp_) {
    fsdp_->zero_grad();
    return;
  }
  for (auto& p : model_->parameters()) p.mutable_grad().reset();
}

torch::Tensor FSDPEngine::optimizer_step() {
  require_trainable("optimizer_step");
  if (!optimizer_ || !fsdp_) {
    throw EngineryError("optimizer_step before initialize() built the optimizer",
                        "fsdp engine, rank " + std::to_string(args_.rank));
  }
  require_resident("optimizer_step", true, true, true);
  RECORD_USER_SCOPE("enginery::optimizer_step");
  torch::NoGradGuard no_grad;
  fsdp_->settle_grads();  // a unit no backward reached since zero_grad still owes its zeros
  if (optimizer_->streamed()) return streamed_optimizer_step();
  // Shard grads may be bf16 where that held them exactly (FsdpUnit::reduce_grads). The device path hands them to
  // the optimizer untouched (it promotes if its kernel needs fp32); the host path unscales and clips them in place,
  // so it gets fp32 first.
  ShardedGradScaler* scaler = sharded_grad_scaler();
  const bool device_path = optimizer_->fused() && !scaler;
  if (!device_path) optimizer_->promote_grads_to_param_dtype();
  auto& grads = optimizer_->grads();
  if (scaler) scaler->unscale_(grads, *groups_.world);

  // Global norm: local sum of squares over this rank's shards (padding is always zero) -> SUM over the shard
  // group (HSDP replicas hold the same shards) -> sqrt. Stays a device tensor, accumulated in fp32 whatever the
  // grads' dtype: one multi-tensor pass (ATen's _foreach_norm) when all are fp32, else one reduction per shard.
  auto sumsq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  if (!grads.empty()) sumsq = grad_norms(grads).pow(2).sum().reshape({1});
  groups_.shard->all_reduce(sumsq);
  auto norm = sumsq.sqrt().reshape({});

  const double clip = args_.optim.clip_grad;
  if (device_path) {
    // Everything stays on the device (no host synchronisation inside the step): the clip coefficient becomes the
    // fused kernel's grad divisor, and a non-finite norm skips the update there, on every rank alike (the norm
    // is the all-reduced one).
    torch::Tensor grad_scale;
    if (clip > 0.0) grad_scale = torch::clamp_min((norm + 1e-6) / clip, 1.0).reshape({1});
    auto found_inf = torch::isfinite(norm).logical_not().to(torch::kFloat).reshape({1});
    optimizer_->step_fused(lr_scheduler_->lr(), grad_scale, found_inf);
    return norm;
  }
  if (clip > 0.0) {
    // As torch.nn.utils.clip_grad_norm_.
    auto coef = torch::clamp(clip / (norm + 1e-6), c10::nullopt, 1.0);
    for (auto& g : grads) g.mul_(coef);
  }

  if (!skip_step(norm, scaler)) optimizer_->step(lr_scheduler_->lr());
  if (scaler) scaler->update();
  return norm;
}

void FSDPEngine::require_trainable(const std::string& what) const {
  if (args_.engine.forward_only) {
    throw EngineryError(what + " on a forward-only engine (it holds no optimizer)",
                        "fsdp engine, rank " + std::to_string(args_.rank) + ", engine.forward_only",
                        "forward_only = false for an engine that trains; infer_batch / forward_only calls here");
  }
}

bool FSDPEngine::skip_step(const torch::Tensor& norm, ShardedGradScaler* scaler) const {
  if (scaler) return scaler->should_skip();
  const bool skip = !std::isfinite(norm.item<double>());
  if (skip && args_.rank == 0) {
    std::cerr << "enginery fsdp: grad norm is not finite (" << norm.item<double>()
              << "); skipping this optimizer step on every rank\n";
  }
  return skip;
}

double FSDPEngine::lr_scheduler_step() {
  require_trainable("lr_scheduler_step");
  if (!lr_scheduler_) {
    throw EngineryError("lr_scheduler_step before initialize()", "fsdp engine, rank " + std::to_string(args_.rank));
  }
  return lr_scheduler_->step();
}

}  // namespace fsdp
}  // namespace enginery
