#pragma once
// Elementwise pieces of the decoder layer with fewer passes over memory and fewer saved activations than the
// plain composition of ATen ops, each computing the same values as that composition (transformers' formulas).
#include <torch/torch.h>

namespace enginery {
namespace models {

// silu(gate) * up. Saves gate and up only; backward recomputes silu(gate) (one pass) instead of keeping it, which
// saves one [tokens x intermediate] activation per layer.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// down_proj(silu(gate) * up) for a bias-free down projection `down_weight` [hidden, intermediate], saving gate,
// up and the weight only: backward recomputes the product (one pass) instead of keeping a third
// [tokens x intermediate] activation per layer. Takes enginery's CUDA kernels; fused_swiglu_down_applies says when.
bool fused_swiglu_down_applies(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor swiglu_down(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& down_weight);

// A linear layer whose output value nobody reads, only its gradient (a recomputed region's last GEMM, see
// AttentionContext::recomputing): forward returns zeros of the output's shape (plus the bias) without the GEMM;
// backward computes x's, the weight's and the bias's gradients as the linear would. The weight (and bias) are cast
// to x's dtype first, as autocast's linear multiplies.
torch::Tensor linear_output_unused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// Rotary embedding of x [B, T, heads, D] with cos/sin [B, T, D] in one kernel each way (x * cos + rotate_half(x) *
// sin, transformers' formula, in fp32 with one rounding). CUDA kernels only; fused_rope_applies says when.
bool fused_rope_applies(const torch::Tensor& x);
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Whether RMSNorm takes the fused kernel (compat::rms_norm) for `x` and `weight`: CUDA, a LibTorch with a fused
// rms_norm (2.8+), same dtypes. Elsewhere it keeps transformers' composite formula.
bool fused_rms_norm_applies(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace models
}  // namespace enginery
