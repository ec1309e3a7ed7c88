#pragma once
// What BaseEngine's optional operations hand back (docs/ARCHITECTURE.md, "The contract"): the full weights as a
// stream (export_weights), this rank's own pieces of them (export_shards) and its trainable state (local_parameters).
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace enginery {

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

// Collective: every rank calls next() the same number of times, until it returns an empty group.
class WeightStream {
 public:
  virtual ~WeightStream();
  // The next group of full tensors (engine's device, stream's dtype), empty when done. The caller's own: no later
  // next() reuses their memory and none aliases the engine's weights, so a receiver keeps them without copying.
  virtual std::vector<NamedTensor> next() = 0;
};

// One parameter's piece on this rank: the elements [flat_offset, flat_offset + local.numel()) of the full tensor
// flattened row-major. Every parameter has exactly one piece per rank, possibly empty (a rank whose shard holds
// none of it: flat_offset 0, numel 0), so every rank yields the same names in the same order.
struct LocalShard {
  std::string name;                 // the Hugging Face name, as get_per_tensor_param names the full tensor
  std::vector<int64_t> full_shape;  // of the full tensor
  int64_t flat_offset = 0;
  torch::Tensor local;              // 1-D, in the requested dtype, a copy the caller owns
};

// Which ranks' pieces make up the full tensors, the same for every parameter of the engine.
struct ShardPlacement {
  std::vector<int64_t> group_ranks;  // ascending, this one among them: disjoint pieces covering every element once
  bool contributes = true;  // false on a replica (HSDP's; a replicated engine's rank > 0): its pieces repeat others'
};

// Not collective: reads this rank's shards only.
class ShardStream {
 public:
  virtual ~ShardStream();
  // The next group of pieces (one FSDP unit's), empty when done.
  virtual std::vector<LocalShard> next() = 0;
};

// One parameter on this rank, placed as a LocalShard is; views valid until the engine replaces its storage (a step's
// first reduction after zero grad, to(), load): ask again after each.
struct LocalParameter {
  std::string name;                 // the Hugging Face name
  std::vector<int64_t> full_shape;  // of the full tensor
  int64_t flat_offset = 0;
  torch::Tensor param;  // 1-D fp32 view of the master weights: writes change the model
  torch::Tensor grad;   // 1-D fp32 view of the gradient; undefined while none is held (after zero grad)
};

// AdamW's, by torch.optim.AdamW's names. A written `lr` holds until the next lr_scheduler_step (as a torch LR
// scheduler overwrites param_group["lr"]); what torch.optim.AdamW refuses (betas outside [0, 1), ...) is refused too.
struct OptimizerHyperparameters {
  double lr = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

}  // namespace enginery
