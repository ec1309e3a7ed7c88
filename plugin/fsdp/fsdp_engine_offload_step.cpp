// FSDPEngine with engine.param_offload / engine.optimizer_offload (docs/ARCHITECTURE.md, "The contract", offload
// while computing): where the state lives, and the engine.<backend>.offload_step key that places the optimizer step
// over it on the device (streamed) or on the host (OptimizerStep, optimizer_step.h).
#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {

// [engine.<backend>] offload_step (backend_options.h): where the offloaded optimizer step runs. "device" (the
// default) streams each shard through the GPU; "host" runs it on the CPU over the host tensors, which needs both
// offload keys. Both exist so that they can be measured against each other on the machine at hand
// (bench/gpu/run_offload_bench.sh).
void FSDPEngine::place_offloaded_state() {
  const bool params = args_.engine.param_offload, state = args_.engine.optimizer_offload;
  if (!params && !state) return;
  if (!optimizer_ && args_.engine.forward_only) {  // nothing but the masters to keep on the host
    if (params) fsdp_->keep_masters_on_host(std::make_shared<CopyStream>(device_));
    return;
  }
  if (!optimizer_) {
    throw EngineryError("param_offload / optimizer_offload move the FSDP master shards and AdamW's state; this "
                        "engine built no optimizer",
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

}  // namespace fsdp
}  // namespace enginery
