#pragma once
// Packed sequences (docs/ARCHITECTURE.md, "One step"): the tokens of a micro-batch as one row, sequence after
// sequence, so no layer computes on padding. Attention runs per sequence (never across two); position ids restart at
// every sequence. A PackedBatch comes from a packed input (host_api/batch.h's [Note: packed batch]: cu_seqlens) or
// from a padded one with its padding taken out (model.use_remove_padding); either way it knows a padded layout of its
// tokens, so outputs move between the two forms with the functions below.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "host_api/model_output.h"

namespace enginery {
namespace models {

// Where the sequences of a packed row are: sequence i holds rows [offsets[i], offsets[i+1]). Empty sequences are
// left out (the kernels never see a zero length).
struct PackedSequences {
  torch::Tensor cu_seqlens;      // int32 [S + 1], on the model's device (what varlen kernels read)
  std::vector<int64_t> offsets;  // the same on the host (the per-sequence path)
  int64_t max_len = 0;
  bool defined() const { return cu_seqlens.defined(); }
};

// [Note: packed rows and their padded layout] N tokens as one row, and where each sits in a padded [rows, seq_len]
// layout: the caller's padded batch (pack_batch), or for a packed input the right-padded [S, longest] one
// (pack_sequences). The language head computes only `pair_rows`, the rows whose next row is the next token of the
// same sequence; verl's alignment puts that prediction at the row itself (log_probs[i] for token i + 1, 0 at a
// sequence's last token), the padded one at the next token's place (log_probs[b, t] for token t itself).
struct PackedBatch {
  torch::Tensor index;          // int64 [N]: flat position r * seq_len + t of each token in the padded layout
  torch::Tensor input_ids;      // int64 [1, N]
  torch::Tensor position_ids;   // int64 [1, N]
  torch::Tensor pair_rows;      // int64 [P], increasing
  int64_t rows = 0, seq_len = 0;  // the padded layout
  PackedSequences sequences;
  int64_t tokens() const { return input_ids.size(1); }
};

// A padded micro-batch: `valid` bool [B, T], `input_ids` and `position_ids` [B, T] on the same device. Rows without a
// valid token contribute no sequence; a pair is two valid tokens adjacent in a row (a mask with holes computes no
// pair across a hole, as the padded path). N = valid.sum() must be > 0.
PackedBatch pack_batch(const torch::Tensor& valid, const torch::Tensor& input_ids, const torch::Tensor& position_ids);

// A packed input: input_ids [N] int64, cu_seqlens int64 [S + 1] (0, non-decreasing, ending at N; empty sequences
// allowed), position_ids [N] or undefined (then 0, 1, ... in each sequence). Throws EngineryError naming the
// tensor when they do not fit together. N may be 0.
PackedBatch pack_sequences(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens,
                           const torch::Tensor& position_ids);

// Per-token values [N, ...] -> the padded layout [rows, seq_len, ...], zeros elsewhere; and back. Differentiable.
torch::Tensor to_padded(const torch::Tensor& values, const PackedBatch& packed);
torch::Tensor from_padded(const torch::Tensor& padded, const PackedBatch& packed);
// Next-token outputs (log-probs, entropy) between verl's alignment [N] and the padded one [rows, seq_len]: only the
// pairs move, everything else is 0. Differentiable.
torch::Tensor next_token_to_padded(const torch::Tensor& values, const PackedBatch& packed);
torch::Tensor next_token_from_padded(const torch::Tensor& padded, const PackedBatch& packed);
// All of a ModelOutput's tensors so: [N] in verl's alignment <-> the padded layout. A model that computes padded
// batches only runs a packed input as pack_sequences, to_padded (ids, a mask of ones, positions), its padded
// forward, outputs_from_padded.
ModelOutput outputs_to_padded(ModelOutput out, const PackedBatch& packed);
ModelOutput outputs_from_padded(ModelOutput out, const PackedBatch& packed);

// Causal attention within each packed sequence: q [N, H, D], k/v [N, Hkv, D] -> [N, H, D]. aten's varlen flash
// kernel where it applies; otherwise one attention call per sequence (CPU, fp32, LibTorch < 2.1).
torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const PackedSequences& seqs, double scale);

}  // namespace models
}  // namespace enginery
