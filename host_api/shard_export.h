#pragma once
// Exporting this rank's own pieces of the weights, by Hugging Face name, without gathering anything
// (docs/ARCHITECTURE.md, "The contract", shard export; host_api 2.5). What a delta weight sync needs (verl's
// get_per_tensor_param_shard): each rank diffs only what it holds against its own snapshot and ships the changed
// elements, so no rank ever materialises a full tensor. An optional interface, like WeightExportingEngine, so
// BaseEngine's vtable stays that of 2.0; engines that implement it declare the capability `shard-export`.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace enginery {

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
  // Ranks of the engine's data-parallel group, ascending, this rank among them: their pieces of a parameter are
  // disjoint and together cover every element once. Only this rank for an engine that holds every full tensor.
  std::vector<int64_t> group_ranks;
  // False on a rank whose group is a replica of another's (HSDP's replicate dimension, or every rank but 0 of an
  // engine that holds the full tensors everywhere): its pieces repeat values that another group already exports.
  bool contributes = true;
};

// Not collective: reads this rank's shards only.
class ShardStream {
 public:
  virtual ~ShardStream();
  // The next group of pieces (one FSDP unit's), empty when done.
  virtual std::vector<LocalShard> next() = 0;
};

// What an engine implements to export its shards (capability `shard-export`).
class ShardExportingEngine {
 public:
  virtual ~ShardExportingEngine();  // key function: defined out of line in libenginery_host_api
  virtual ShardPlacement shard_placement() const = 0;
  // The stream refers to the engine's shards: use it up before the engine changes (a step, to(), destruction).
  virtual std::unique_ptr<ShardStream> export_shards(c10::ScalarType dtype) = 0;
};

}  // namespace enginery
