#pragma once
// One interface for every collective the FSDP engine issues (docs/ARCHITECTURE.md, "Collectives"). Native ops on NCCL
// (_allgather_base, _reduce_scatter_base); on Gloo, list allgathers and an all-reduce stand in for them, bf16 is
// gathered as its fp16 bits and reduced in fp32 (docs/ARCHITECTURE.md, "Collectives").
// All ops are blocking: they return after the result is in place.
#include <torch/torch.h>

#include "support/torch_compat.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

enum class ReduceOp { kSum, kMax, kMin };

class ENGINERY_FSDP_API Collectives {
 public:
  // `group` may be null only when size == 1 (every op is then a local copy).
  Collectives(c10::intrusive_ptr<compat::CommGroup> group, int64_t rank, int64_t size);

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  const c10::intrusive_ptr<compat::CommGroup>& group() const { return group_; }

  // out: [size * n] contiguous; in: [n]. Rank r's input lands in out[r*n, (r+1)*n).
  void all_gather_into(torch::Tensor& out, const torch::Tensor& in) const;
  // out: [n]; in: [size * n]. out = sum over ranks of in[rank*n, (rank+1)*n) — always a SUM.
  void reduce_scatter_into(torch::Tensor& out, const torch::Tensor& in) const;
  // out: [n] contiguous; in: [size * n], read on `root` only (may be undefined elsewhere). Rank r receives root's
  // in[r*n, (r+1)*n).
  void scatter_into(torch::Tensor& out, const torch::Tensor& in, int64_t root) const;
  // out, in: [size * n] contiguous. Chunk j of this rank's `in` lands in chunk (this rank) of rank j's `out`
  // (Ulysses' exchanges, models/sequence_parallel.h).
  void all_to_all_into(torch::Tensor& out, const torch::Tensor& in) const;
  void all_reduce(torch::Tensor& t, ReduceOp op = ReduceOp::kSum) const;
  void broadcast(torch::Tensor& t, int64_t root) const;
  void barrier() const;

 private:
  bool native_base_ops() const;  // _allgather_base / _reduce_scatter_base usable on this group

  c10::intrusive_ptr<compat::CommGroup> group_;
  int64_t rank_;
  int64_t size_;
};

}  // namespace fsdp
}  // namespace enginery
