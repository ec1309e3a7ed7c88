// FSDPEngine::move_state, verl's to(device, model, optimizer, grad) (docs/ARCHITECTURE.md, "The contract"): the
// engine's state leaves the GPU while a colocated rollout engine uses it, and comes back unchanged.
//
// Aliasing: the units and AdamW hold the same tensor objects (AdamW's params/grads lists are handles to the units'
// shard and shard-gradient tensors, and FsdpUnit already swaps a shard gradient's storage and dtype in place with
// set_data). Moving therefore re-points each tensor object at a copy on the target device with set_data instead
// of making new tensors: every holder follows, nothing is rebuilt, and the step after a round trip runs the very
// same code on the very same values. No persistent view of a master shard or shard gradient exists (the flat
// layout's full parameters are views of the gathered buffer, which has no storage between steps), so there is no
// view left pointing at the old storage.
#include <c10/core/DeviceGuard.h>

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {
namespace {

std::string where_of(const EngineArgs& args) {
  return "fsdp engine (" + args.engine.strategy + "), rank " + std::to_string(args.rank) + ", to()";
}

// Copies every tensor to `target` (pinned host memory when it leaves a GPU, so the copy is a DMA that does not
// block), waits once for all of them, then points each tensor object at its copy. The old storage is released with
// the tensor object's reference (nothing else holds it), and on CUDA the allocator's cache is emptied.
void move_in_place(const std::vector<torch::Tensor*>& tensors, const torch::Device& target,
                   const torch::Device& gpu) {
  torch::NoGradGuard no_grad;
  c10::OptionalDeviceGuard guard;
  if (gpu.is_cuda()) guard.reset_device(gpu);
  std::vector<torch::Tensor> copies;
  copies.reserve(tensors.size());
  for (const torch::Tensor* t : tensors) {
    const bool pin = target.is_cpu() && t->is_cuda();
    auto copy = torch::empty(t->sizes(), t->options().device(target).pinned_memory(pin));
    copy.copy_(*t, /*non_blocking=*/true);
    copies.push_back(std::move(copy));
  }
  compat::device_synchronize(gpu);  // the one synchronisation: every copy above is complete
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i]->set_data(copies[i]);
  copies.clear();
  if (gpu.is_cuda()) compat::cuda_empty_cache();
}

}  // namespace

// Not collective, but every rank must agree on what is away: a step refused on one rank only would leave the others
// waiting in the host loop's token-count all-reduce.
void FSDPEngine::move_state(const torch::Device& device, bool model, bool optimizer, bool grad) {
  if (!fsdp_ || (!optimizer_ && !args_.engine.forward_only)) {
    throw EngineryError("to() before initialize()", where_of(args_));
  }
  optimizer = optimizer && optimizer_;  // a forward-only engine has no optimizer state to move
  const std::string allowed = device_.is_cuda() ? "cpu, " + device_.str() : std::string("cpu");
  const bool home = device.type() == device_.type() && (!device.has_index() || device.index() == device_.index());
  if (!device.is_cpu() && !home) {
    throw EngineryError("this engine computes on " + device_.str() + " and cannot move its state to " + device.str(),
                        where_of(args_), allowed);
  }
  const torch::Device target = device.is_cpu() ? torch::Device(torch::kCPU) : device_;
  const bool away = target != device_;

  // State that engine.param_offload / optimizer_offload keep on the host is at home there: it neither leaves nor
  // comes back, and its part is never marked away (so to(cpu) of a fully offloaded engine moves nothing).
  StateParts parts{model && !args_.engine.param_offload, optimizer && !args_.engine.optimizer_offload,
                   grad && !args_.engine.param_offload};
  // A part already where it is asked to go stays put (the mode guards ask for what a mode needs, whether or not
  // it is away). A CPU engine copies anyway: both places are "cpu" there, and the copy is what its tests exercise.
  if (device_.is_cuda()) parts = residency_.to_move(parts, away);
  fsdp_->drop_prefetched();
  std::vector<torch::Tensor*> tensors;
  for (auto& u : fsdp_->units()) {
    if (parts.model) {
      u.reshard();  // between steps every unit is sharded already; full parameters are derived, never moved
      tensors.push_back(&u.shard());
    }
    if (parts.grad) tensors.push_back(&u.shard_grad_unsettled());
  }
  if (parts.optimizer) {  // (optimizer_ is set: see above)
    for (auto* list : {&optimizer_->exp_avg(), &optimizer_->exp_avg_sq(), &optimizer_->device_steps()}) {
      for (auto& t : *list) tensors.push_back(&t);
    }
  }
  move_in_place(tensors, target, device_);
  residency_.moved(parts, away);
}

void FSDPEngine::require_resident(const std::string& what, bool model, bool optimizer, bool grad) const {
  const std::string parts = residency_.away_among({model, optimizer, grad});
  if (parts.empty()) return;
  std::string remedy = "call to(" + device_.str() + ") first";
  if (options_.offload_outside_modes) {
    remedy += ", or call it inside train_mode() / eval_mode(): " + option_key(args_.engine, kOffloadOutsideModes) +
              " keeps the state on the host outside them";
  }
  throw EngineryError(what + ": the engine is offloaded to cpu (" + parts + "); " + remedy,
                      "fsdp engine (" + args_.engine.strategy + "), rank " + std::to_string(args_.rank));
}

}  // namespace fsdp
}  // namespace enginery
