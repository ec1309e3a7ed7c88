#include "plugin/fsdp/optimizer_step.h"

#include <cmath>
#include <iostream>

namespace enginery {
namespace fsdp {
namespace {

// fp32 [n]: the 2-norm of each gradient, accumulated in fp32 whatever the gradients' dtype: one multi-tensor pass
// (ATen's _foreach_norm) when all are fp32, else one reduction per gradient.
std::vector<torch::Tensor> grad_norms(const std::vector<torch::Tensor>& grads) {
  if (grads.empty()) return {};
  bool all_fp32 = true;
  for (const auto& g : grads) all_fp32 = all_fp32 && g.scalar_type() == torch::kFloat;
  if (all_fp32) return at::_foreach_norm(grads, 2);
  std::vector<torch::Tensor> norms;
  for (const auto& g : grads) norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, torch::kFloat));
  return norms;
}

}  // namespace

OptimizerStep::OptimizerStep(FsdpModule& module, AdamW& optimizer, StepPlacement placement, bool grads_on_host,
                             double clip_grad, int64_t rank, const torch::Device& device)
    : module_(module),
      optimizer_(optimizer),
      placement_(placement),
      grads_on_host_(grads_on_host),
      clip_grad_(clip_grad),
      rank_(rank),
      device_(device) {}

torch::Tensor OptimizerStep::run(double lr, ShardedGradScaler* scaler) {
  torch::NoGradGuard no_grad;
  module_.settle_grads();  // a unit no backward reached since zero_grad still owes its zeros
  // An upload of a master made before this step would be stale after it.
  if (placement_ != StepPlacement::kResident) module_.drop_prefetched();
  // Shard grads may be bf16 where that held them exactly (FsdpUnit::reduce_grads). The device path hands them to
  // the optimizer untouched (it promotes if its kernel needs fp32); the other paths unscale and clip them, so they
  // get fp32 first: here where they are resident, as each passes where they live on the host.
  const bool device_path = optimizer_.fused() && !scaler && placement_ != StepPlacement::kOnHost;
  if (!device_path && !grads_on_host_) optimizer_.promote_grads_to_param_dtype();

  const torch::Tensor norm = global_norm(scaler);
  if (device_path) {
    update_on_device(norm, lr);
    return norm;
  }
  // Unscale (where the scaler did not already rewrite the gradients), then clip as torch.nn.utils.clip_grad_norm_.
  std::vector<torch::Tensor> multipliers;
  if (scaler && !rewrites_grads_in_place()) multipliers.push_back(scaler->inv_scale());
  if (clip_grad_ > 0.0) {
    auto coef = torch::clamp(clip_grad_ / (norm + 1e-6), c10::nullopt, 1.0);
    if (rewrites_grads_in_place()) {
      for (auto& g : optimizer_.grads()) g.mul_(coef);
    } else {
      multipliers.push_back(coef);
    }
  }
  if (!skip(norm, scaler)) update(lr, multipliers);
  if (scaler) scaler->update();
  return norm;
}

// Local sum of squares over this rank's shards (padding is always zero) -> SUM over the shard group (HSDP replicas
// hold the same shards) -> sqrt. Stays a device tensor, accumulated in fp32. found_inf is agreed over the whole
// data-parallel group before the norm's reduction ([Note: scaler found-inf agreement]).
torch::Tensor OptimizerStep::global_norm(ShardedGradScaler* scaler) {
  const DpGroups& groups = module_.groups();
  std::vector<torch::Tensor> norms;
  if (rewrites_grads_in_place()) {
    if (scaler) scaler->unscale_(optimizer_.grads(), *groups.world);
    norms = grad_norms(optimizer_.grads());
  } else {
    for (auto& u : module_.units()) norms.push_back(u.shard_grad_norm());
  }
  auto sumsq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  if (!norms.empty()) sumsq = torch::stack(norms).pow(2).sum().reshape({1});
  const bool norm_is_scaled = scaler && !rewrites_grads_in_place();
  if (norm_is_scaled) {
    scaler->record_found_inf(torch::isfinite(sumsq).logical_not().to(torch::kFloat), *groups.world);
  }
  groups.shard->all_reduce(sumsq);
  auto norm = sumsq.sqrt().reshape({});
  if (norm_is_scaled) norm = norm * scaler->inv_scale().reshape({});
  return norm;
}

void OptimizerStep::update_on_device(const torch::Tensor& norm, double lr) {
  torch::Tensor grad_scale;
  if (clip_grad_ > 0.0) grad_scale = torch::clamp_min((norm + 1e-6) / clip_grad_, 1.0).reshape({1});
  auto found_inf = torch::isfinite(norm).logical_not().to(torch::kFloat).reshape({1});
  if (placement_ == StepPlacement::kResident) {
    optimizer_.step_fused(lr, grad_scale, found_inf);
    return;
  }
  optimizer_.step_streamed(lr, {}, grad_scale, found_inf);
  compute_copies_written(true);  // a skip on the device wrote the unchanged masters' casts: fresh all the same
}

void OptimizerStep::update(double lr, const std::vector<torch::Tensor>& grad_multipliers) {
  switch (placement_) {
    case StepPlacement::kResident:
      optimizer_.step(lr);  // unscale and clip already wrote the gradients
      return;
    case StepPlacement::kStreamed:
      optimizer_.step_streamed(lr, grad_multipliers, torch::Tensor(), torch::Tensor());
      compute_copies_written(true);
      return;
    case StepPlacement::kOnHost:
      optimizer_.step_on_host(lr, grad_multipliers);
      compute_copies_written(false);  // the next unshard of each unit writes its copy
      return;
  }
}

bool OptimizerStep::skip(const torch::Tensor& norm, ShardedGradScaler* scaler) const {
  if (scaler) return scaler->should_skip();
  const bool skip = !std::isfinite(norm.item<double>());
  if (skip && rank_ == 0) {
    std::cerr << "enginery fsdp: grad norm is not finite (" << norm.item<double>()
              << "); skipping this optimizer step on every rank\n";
  }
  return skip;
}

void OptimizerStep::compute_copies_written(bool written) {
  for (auto& u : module_.units()) u.set_compute_copy_fresh(written);
}

}  // namespace fsdp
}  // namespace enginery
