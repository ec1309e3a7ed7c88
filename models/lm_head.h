#pragma once
// Per-token log-probs (and entropy) of given target tokens under logits = hidden @ weight^T, computed in chunks of
// rows so that the [rows x vocab] fp32 logits never exist at once, in forward or backward (backward recomputes
// each chunk's logits). Logits are computed in `compute_dtype` (the autocast / parameter dtype), log-softmax in fp32.
#include <torch/torch.h>

namespace enginery {
namespace models {

struct TokenLogProbs {
  torch::Tensor log_probs;  // [N] fp32
  torch::Tensor entropy;    // [N] fp32, undefined unless asked
};

// hidden [N, H], weight [V, H], targets [N] int64. chunk_rows <= 0 picks default_chunk_rows(V, hidden's device).
// Differentiable with respect to hidden and weight.
TokenLogProbs chunked_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                bool compute_entropy, c10::ScalarType compute_dtype, int64_t chunk_rows = 0);

// The plain computation over the full logits (reference for tests and the benchmark).
TokenLogProbs full_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             bool compute_entropy, c10::ScalarType compute_dtype);

int64_t default_chunk_rows(int64_t vocab_size);
// The automatic chunk on `device`: 64 MiB of fp32 logits on CPU, 512 MiB on CUDA (larger matmuls, fewer passes
// over the weight and its fp32 gradient).
int64_t default_chunk_rows(int64_t vocab_size, const torch::Device& device);

}  // namespace models
}  // namespace enginery
