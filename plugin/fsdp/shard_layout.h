#pragma once
// How one unit's parameters map onto equal per-rank shards (docs/ARCHITECTURE.md, "One step"). Both strategies describe the unit as a
// "packed" buffer of world * S elements of which rank r owns [r*S, (r+1)*S):
//   fsdp  (FlatParamLayout): the parameters flattened and concatenated, padded at the end (FSDP1's FlatParameter);
//                            the full parameters are views of the gathered buffer.
//   fsdp2 (PerParamLayout):  every parameter chunked on dim 0 into world chunks of ceil(dim0 / world) rows (zero
//                            padded); rank r's segment is its chunk of each parameter in order, so the gathered
//                            buffer is copied out into per-parameter tensors (FSDP2's all-gather copy-out).
// The same packing turns full gradients into the reduce-scatter input, so sharding and gradient reduction can never
// disagree about who owns which element.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

// How a unit's parameters are cut into shards. A property of the sharding, not the registry backend name that
// selects it (layout_for_backend maps one onto the other).
enum class ShardingLayout { kFlatParameter, kPerParameter };
// "fsdp" | "fsdp2": the names checkpoint metadata records (plugin/fsdp/CHECKPOINT.md).
ENGINERY_FSDP_API const char* layout_name(ShardingLayout layout);
ENGINERY_FSDP_API ShardingLayout layout_from_name(const std::string& name, const std::string& where);
// fsdp -> flat parameter; fsdp2 and veomni -> per parameter. Throws EngineryError for another backend.
ENGINERY_FSDP_API ShardingLayout layout_for_backend(const std::string& backend);

// Elements [begin, end) of parameter `param` (flattened, unpadded) sit at shard[shard_offset, + (end - begin)) on a
// rank. Checkpoints store these ranges, so any layout at any world size can read what another wrote.
struct ShardRange {
  size_t param = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t shard_offset = 0;
};

// [Note: sharding layout] (docs/ARCHITECTURE.md, "One step", FSDP inside forward_step) One object decides which
// elements each rank owns: pack() builds both the buffer the all-gather fills and the reduce-scatter's input, and
// owned_ranges() is what checkpoints, shard export and train state read. Nothing else computes ownership, so
// sharding, gradient reduction, checkpoints and exported pieces cannot disagree about which rank holds what.
class ENGINERY_FSDP_API ShardLayout {
 public:
  ShardLayout(std::vector<std::vector<int64_t>> shapes, int64_t world);
  virtual ~ShardLayout();

  int64_t world() const { return world_; }
  int64_t shard_numel() const { return shard_numel_; }  // S
  size_t num_params() const { return shapes_.size(); }
  const std::vector<int64_t>& shape(size_t i) const { return shapes_[i]; }

  // Writes `full` (one tensor per parameter, any dtype; undefined = zeros) into `packed` ([world * S], its dtype).
  virtual void pack(const std::vector<torch::Tensor>& full, torch::Tensor& packed) const = 0;
  // The full parameters of a packed buffer: views of it where the layout allows (aliases_packed()), else copies.
  virtual std::vector<torch::Tensor> unpack(const torch::Tensor& packed) const = 0;
  // True when unpack() returns views, so full parameters can live inside the gathered buffer.
  virtual bool aliases_packed() const = 0;
  // What rank `rank` holds, as element ranges of the full parameters (padding excluded), in shard order.
  virtual std::vector<ShardRange> owned_ranges(int64_t rank) const = 0;

  static std::unique_ptr<ShardLayout> create(ShardingLayout layout, std::vector<std::vector<int64_t>> shapes,
                                             int64_t world);

 protected:
  void set_shard_numel(int64_t s) { shard_numel_ = s; }
  std::vector<std::vector<int64_t>> shapes_;
  int64_t world_;
  int64_t shard_numel_ = 0;
};

class ENGINERY_FSDP_API FlatParamLayout final : public ShardLayout {
 public:
  FlatParamLayout(std::vector<std::vector<int64_t>> shapes, int64_t world);
  void pack(const std::vector<torch::Tensor>& full, torch::Tensor& packed) const override;
  std::vector<torch::Tensor> unpack(const torch::Tensor& packed) const override;
  bool aliases_packed() const override { return true; }
  std::vector<ShardRange> owned_ranges(int64_t rank) const override;

 private:
  std::vector<int64_t> offsets_;  // of each parameter in the flat buffer
};

class ENGINERY_FSDP_API PerParamLayout final : public ShardLayout {
 public:
  PerParamLayout(std::vector<std::vector<int64_t>> shapes, int64_t world);
  void pack(const std::vector<torch::Tensor>& full, torch::Tensor& packed) const override;
  std::vector<torch::Tensor> unpack(const torch::Tensor& packed) const override;
  bool aliases_packed() const override { return false; }
  std::vector<ShardRange> owned_ranges(int64_t rank) const override;

 private:
  std::vector<int64_t> chunk_rows_;    // ceil(dim0 / world)
  std::vector<int64_t> chunk_numel_;   // chunk_rows * prod(shape[1:])
  std::vector<int64_t> offsets_;       // of each parameter's chunk inside one rank's segment
};

}  // namespace fsdp
}  // namespace enginery
