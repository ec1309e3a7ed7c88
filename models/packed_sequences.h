#pragma once
// model.use_remove_padding (docs/ARCHITECTURE.md, "One step"): the valid tokens of a micro-batch packed into one
// row, sequence after sequence, so no layer computes on padding. Attention runs per sequence (never across two);
// position ids keep the values the padded layout gives them (restarting at every sequence); the heads' outputs go
// back to the caller's [batch, seq] layout with zeros at padding.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace enginery {
namespace models {

// Where the sequences of a packed row are: sequence i holds rows [offsets[i], offsets[i+1]).
struct PackedSequences {
  torch::Tensor cu_seqlens;      // int32 [S + 1], on the model's device (what varlen kernels read)
  std::vector<int64_t> offsets;  // the same on the host (the per-sequence path)
  int64_t max_len = 0;
  bool defined() const { return cu_seqlens.defined(); }
};

// A micro-batch [B, T] with its padding taken out. Rows without a valid token contribute no sequence.
struct PackedBatch {
  torch::Tensor index;          // int64 [N]: flat position b * T + s of each valid token, in row-major order
  torch::Tensor input_ids;      // int64 [1, N]
  torch::Tensor position_ids;   // int64 [1, N]
  PackedSequences sequences;
};

// `valid` bool [B, T]; `input_ids` and `position_ids` [B, T] on the same device. N = valid.sum() must be > 0.
PackedBatch pack_batch(const torch::Tensor& valid, const torch::Tensor& input_ids, const torch::Tensor& position_ids);

// Packed rows i whose next row i + 1 is the next token of the same sequence (adjacent in the padded layout), and
// the flat padded position of that next token: where row i's prediction of it goes.
struct PackedPairs {
  torch::Tensor rows;     // int64 [P]
  torch::Tensor targets;  // int64 [P]: flat padded positions of the predicted tokens
};
PackedPairs packed_pairs(const PackedBatch& packed, int64_t seq_len);

// values [M] at flat padded positions `at` -> [B, T], zeros elsewhere (differentiable in `values`).
torch::Tensor unpack_to_padded(const torch::Tensor& values, const torch::Tensor& at, int64_t batch, int64_t seq_len);

// Causal attention within each packed sequence: q [N, H, D], k/v [N, Hkv, D] -> [N, H, D]. aten's varlen flash
// kernel where it applies; otherwise one attention call per sequence (CPU, fp32, LibTorch < 2.1).
torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const PackedSequences& seqs, double scale);

}  // namespace models
}  // namespace enginery
