#pragma once
// Elementwise pieces of the decoder layer with fewer passes over memory and fewer saved activations than the
// plain composition of ATen ops, each computing the same values as that composition (transformers' formulas).
#include <torch/torch.h>

namespace enginery {
namespace models {

// silu(gate) * up. Saves gate and up only; backward recomputes silu(gate) (one pass) instead of keeping it, which
// saves one [tokens x intermediate] activation per layer.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// Whether RMSNorm takes the fused kernel (compat::rms_norm) for `x` and `weight`: CUDA, a LibTorch with a fused
// rms_norm (2.8+), same dtypes. Elsewhere it keeps transformers' composite formula.
bool fused_rms_norm_applies(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace models
}  // namespace enginery
