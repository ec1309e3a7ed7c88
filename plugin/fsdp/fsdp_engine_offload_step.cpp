// FSDPEngine with engine.param_offload / engine.optimizer_offload (docs/ARCHITECTURE.md, "The contract", offload
// while computing): where the state lives, and the optimizer step over state that lives on the host. The step is the
// resident one (fsdp_engine_optim.cpp) reordered for gradients that never sit on the device all at once:
//   - the global norm comes from each shard's norm, taken on the device when its reduction produced the gradient
//     (FsdpUnit::shard_grad_norm), so no gradient is uploaded for it;
//   - with the grad scaler, the norm is of the scaled gradients times 1/scale. The scale is a power of two, so this
//     is exactly the norm of the unscaled gradients (every square and sum scales by an exact power of two), and
//     found_inf is a non-finite norm: an inf or nan in any gradient (or a sum of squares beyond fp32, which needs
//     gradients above 1e19);
//   - unscale and clip are applied to each staged gradient as it passes (AdamW::step_streamed), in the resident
//     order, and the skip decision is the resident one.
#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {

// [engine.<backend>] offload_step: where the offloaded optimizer step runs. "device" (the default) streams each
// shard through the GPU; "host" runs it on the CPU over the host tensors, which needs both offload keys. Both exist
// so that they can be measured against each other on the machine at hand (bench/gpu/run_offload_bench.sh).
bool FSDPEngine::host_step_wanted(const EngineConfig& engine) {
  const std::string where = backend_option<std::string>(engine, "offload_step", "device");
  if (where == "device") return false;
  const std::string key = "engine." + engine.strategy + ".offload_step";
  if (where != "host") throw EngineryError("unknown value '" + where + "'", key, "device, host");
  if (!engine.param_offload || !engine.optimizer_offload) {
    throw EngineryError("a host optimizer step needs the parameters and the optimizer state on the host", key,
                        "host with engine.param_offload = true and engine.optimizer_offload = true, else device");
  }
  return true;
}

void FSDPEngine::place_offloaded_state() {
  const bool params = args_.engine.param_offload, state = args_.engine.optimizer_offload;
  if (!params && !state) return;
  if (fsdp_ && !optimizer_ && args_.engine.forward_only) {  // nothing but the masters to keep on the host
    if (params) fsdp_->keep_masters_on_host(std::make_shared<CopyStream>(device_));
    return;
  }
  if (!fsdp_ || !optimizer_) {
    throw EngineryError("param_offload / optimizer_offload move the FSDP master shards and AdamW's state; this "
                        "engine has neither",
                        "fsdp engine (" + args_.engine.strategy + "), rank " + std::to_string(args_.rank) +
                            ", engine.param_offload");
  }
  auto copies = std::make_shared<CopyStream>(device_);
  if (params) fsdp_->keep_masters_on_host(copies);
  optimizer_->stream_through(copies, params, state);
  std::vector<torch::Tensor> compute_copies;  // one per unit: the optimizer's params are the units' shards, in order
  for (auto& u : fsdp_->units()) compute_copies.push_back(u.compute_copy());
  optimizer_->set_compute_copies(std::move(compute_copies));
}

void FSDPEngine::compute_copies_written(bool written) {
  for (auto& u : fsdp_->units()) u.set_compute_copy_fresh(written);
}

torch::Tensor FSDPEngine::streamed_optimizer_step() {
  fsdp_->drop_prefetched();  // an upload of a master made before this step would be stale after it
  ShardedGradScaler* scaler = sharded_grad_scaler();
  const bool device_path = optimizer_->fused() && !scaler && !host_optimizer_step_;
  if (!device_path && !args_.engine.param_offload) optimizer_->promote_grads_to_param_dtype();  // resident grads
  std::vector<torch::Tensor> norms;
  for (auto& u : fsdp_->units()) norms.push_back(u.shard_grad_norm());
  auto sumsq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  if (!norms.empty()) sumsq = torch::stack(norms).pow(2).sum().reshape({1});
  if (scaler) scaler->record_found_inf(torch::isfinite(sumsq).logical_not().to(torch::kFloat), *groups_.world);
  groups_.shard->all_reduce(sumsq);
  auto norm = sumsq.sqrt().reshape({});
  if (scaler) norm = norm * scaler->inv_scale().reshape({});

  const double clip = args_.optim.clip_grad;
  const double lr = lr_scheduler_->lr();
  if (device_path) {  // as the resident device path: clip as the kernel's divisor, a non-finite norm skips on device
    torch::Tensor grad_scale;
    if (clip > 0.0) grad_scale = torch::clamp_min((norm + 1e-6) / clip, 1.0).reshape({1});
    auto found_inf = torch::isfinite(norm).logical_not().to(torch::kFloat).reshape({1});
    optimizer_->step_streamed(lr, {}, grad_scale, found_inf);
    compute_copies_written(true);  // a skip on the device wrote the unchanged masters' casts: fresh all the same
    return norm;
  }
  std::vector<torch::Tensor> multipliers;
  if (scaler) multipliers.push_back(scaler->inv_scale());
  if (clip > 0.0) multipliers.push_back(torch::clamp(clip / (norm + 1e-6), c10::nullopt, 1.0));
  if (!skip_step(norm, scaler)) {
    if (host_optimizer_step_) {
      optimizer_->step_on_host(lr, multipliers);
      compute_copies_written(false);  // the next unshard of each unit writes its copy
    } else {
      optimizer_->step_streamed(lr, multipliers, torch::Tensor(), torch::Tensor());
      compute_copies_written(true);
    }
  }
  if (scaler) scaler->update();
  return norm;
}

}  // namespace fsdp
}  // namespace enginery
