#pragma once
// Reads a checkpoint written at any world size, fsdp_size or strategy into this rank's shards: for every range the
// rank owns now it copies the overlapping stored segments, mapping (and verifying) only the files it touches.
// Memory stays bounded by the mappings; nothing is materialised at full size.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plugin/fsdp/checkpoint_format.h"
#include "plugin/fsdp/checkpoint_files.h"
#include "plugin/fsdp/checkpoint_plan.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

class CheckpointReader {
 public:
  // Checks that the stored parameter table matches `plan` (names, shapes); throws naming the first difference.
  CheckpointReader(std::string dir, Metadata meta, const CheckpointPlan& plan);

  // Fills state `state` of every unit (tensors laid out like the units' shards, on any device) for shard rank
  // `shard_rank` of `layouts`: padding becomes zero, every owned element must be stored exactly once.
  void read_state(const std::string& state, std::vector<torch::Tensor>& per_unit, FsdpModule& fsdp,
                  int64_t shard_rank);
  // The checks of read_state (coverage; every file it reads mapped and verified) without copying anything, so that
  // a load can find every fault before it changes a tensor.
  void check_state(const std::string& state, FsdpModule& fsdp, int64_t shard_rank);

  const Metadata& metadata() const { return meta_; }
  // The verified text of a small file (extra state); throws naming it when it is missing or corrupt.
  std::string read_text(const std::string& name);

 private:
  struct Stored {
    size_t file;
    int64_t begin, end;
    uint64_t offset;
  };
  const MappedFile& file(size_t index);
  // Calls `piece(unit, range, a, b, stored, file)` for each stored piece [a, b) of each range shard rank `shard_rank`
  // owns, once the pieces of the range are checked to tile it exactly and their files are mapped.
  using PieceFn = std::function<void(size_t, const ShardRange&, int64_t, int64_t, const Stored&, const MappedFile&)>;
  void visit_pieces(const std::string& state, FsdpModule& fsdp, int64_t shard_rank, const PieceFn& piece);

  std::string dir_;
  Metadata meta_;
  const CheckpointPlan& plan_;
  std::vector<size_t> param_of_plan_;  // plan param id -> metadata param index
  std::map<std::pair<size_t, std::string>, std::vector<Stored>> index_;  // (meta param, state) -> segments
  std::map<size_t, std::unique_ptr<MappedFile>> mapped_;
};

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
