#pragma once
// Ulysses sequence parallelism ([engine.<backend>] ulysses_sequence_parallel_size; docs/ARCHITECTURE.md,
// "Sequence parallelism"): the ranks of a sequence-parallel group hold the same micro-batch, each computes a
// contiguous slice of its packed tokens, and attention swaps the token split for a head split with all-to-alls.
// The engine owns the process group; the model sees it through SequenceParallelGroup, so models/ links no c10d.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/packed_sequences.h"

namespace enginery {
namespace models {

// The exchanges of one sequence-parallel group, implemented by the engine over its process group. Blocking; every
// rank of the group calls them in the same order.
class SequenceParallelGroup {
 public:
  virtual ~SequenceParallelGroup() = default;
  virtual int64_t size() const = 0;
  virtual int64_t rank() const = 0;
  // in: [size * m] contiguous. Chunk j of `in` goes to rank j; chunk i of the result came from rank i.
  virtual torch::Tensor all_to_all(const torch::Tensor& in) const = 0;
  // in: [m] contiguous -> [size * m], rank i's `in` at chunk i.
  virtual torch::Tensor all_gather(const torch::Tensor& in) const = 0;
};

// [Note: Ulysses token and head split] The packed row of a micro-batch (N valid tokens, models/packed_sequences.h)
// is padded to P = size * n tokens; rank r holds tokens [r * n, (r + 1) * n) through embeddings, projections, MLPs
// and the head. Attention needs every token of a sequence, so around it an all-to-all swaps the split: q/k/v go
// from [n tokens, H heads] to [P tokens, H / size heads] (rank r: heads [r * H / size, (r + 1) * H / size)), and
// the output comes back the same way. The P - N padding tokens form one sequence of their own, so no real token
// attends to them. With fewer kv heads than ranks, each kv head is repeated size / kv_heads times first, so rank r
// gets the one kv head its query heads read.

// The padded packed length P (a multiple of `size` >= tokens) and this rank's slice of it.
struct SequenceSlice {
  int64_t padded = 0;  // P
  int64_t begin = 0;   // rank * n
  int64_t length = 0;  // n
};
SequenceSlice sequence_slice(int64_t tokens, const SequenceParallelGroup& group);

// `seqs` over N tokens, extended by one sequence holding the padding up to P (when P > N).
PackedSequences with_padding_sequence(const PackedSequences& seqs, int64_t padded, const torch::Device& device);

// x [n, heads, D] (this rank's tokens, all heads) -> [size * n, heads / size, D] (all tokens, this rank's heads),
// and back. Differentiable: each one's backward is the other.
torch::Tensor sequence_to_heads(const SequenceParallelGroup& group, const torch::Tensor& x);
torch::Tensor heads_to_sequence(const SequenceParallelGroup& group, const torch::Tensor& x);

// x [n, ...] -> [size * n, ...]: every rank's slice in rank order. Every rank of the group computes the same loss
// from the gathered tensor, so the backward keeps this rank's slice of the gradient (no sum: the engine sums the
// group's parameter gradients, each rank's coming from its own tokens).
torch::Tensor gather_sequence(const SequenceParallelGroup& group, const torch::Tensor& x);

// Causal attention within each packed sequence for q [n, H, D], k/v [n, Hkv, D] of this rank's tokens; `seqs`
// covers all P tokens (with_padding_sequence). Returns [n, H, D].
torch::Tensor ulysses_causal_attention(const SequenceParallelGroup& group, const torch::Tensor& q,
                                       const torch::Tensor& k, const torch::Tensor& v, const PackedSequences& seqs,
                                       double scale);

// The sizes that split `heads` query and `kv_heads` key/value heads (a size s with heads % s == 0, and kv_heads %
// s == 0 or s % kv_heads == 0, as verl requires) and divide `world`: the allowed values of the setting.
std::vector<int64_t> allowed_sequence_parallel_sizes(int64_t heads, int64_t kv_heads, int64_t world);

}  // namespace models
}  // namespace enginery
