#pragma once
// LibTorch face of enginery's CUDA kernels (kernels/cuda/). Built only where LibTorch has CUDA and nvcc is found
// (ENGINERY_HAS_CUDA_KERNELS); elsewhere available() is false and callers keep their ATen composition, which
// computes the same functions (the GPU tests compare the two).
#include <torch/torch.h>

#include "kernels/runtime_switch.h"

#include <utility>

namespace enginery {
namespace kernels {

// Kernel `k` is compiled in and not switched off at run time (runtime_switch.h); applies(): that, and `t` is a CUDA
// tensor of a dtype the kernels take (bf16, fp16; fp32 where noted).
// The kernels are built into this library (whatever the run-time switch says).
bool compiled();
bool available(Kernel k);
bool applies(const torch::Tensor& t, Kernel k);

// silu(gate) * up and its gradient, for contiguous tensors of one shape and dtype.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);
std::pair<torch::Tensor, torch::Tensor> swiglu_backward(const torch::Tensor& grad, const torch::Tensor& gate,
                                                        const torch::Tensor& up);

// Rotary embedding of x [B, T, heads, D] with tables cos/sin [B, T, D] (fp32 or x's dtype); `transpose` applies
// the inverse rotation (the backward). Returns a new contiguous [B, T, heads, D] tensor.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool transpose);

// dst += src where dst is contiguous fp32 and src (bf16, fp16 or fp32) has dst's number of elements: one pass, no
// fp32 copy of src. With `overwrite`, dst = src (dst is then only written).
void accumulate_(torch::Tensor& dst, const torch::Tensor& src, bool overwrite = false);

// One AdamW step in place over contiguous fp32 CUDA tensors param / exp_avg / exp_avg_sq and grad (fp32 or bf16)
// of the same number of elements; `step` is the fp32 device step counter the bias corrections use. grad_scale
// (divides the gradient) and found_inf (non-zero: skip) are fp32 device scalars or undefined. No host sync.
void adamw_(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
            const torch::Tensor& step, double lr, double beta1, double beta2, double eps, double weight_decay,
            const torch::Tensor& grad_scale, const torch::Tensor& found_inf);

// Per row of logits [R, V]: log-sum-exp, log-prob of targets[r], and the entropy when `entropy` is defined; each
// an fp32 [R] tensor the caller allocated (may be rows of a larger one).
void log_softmax_stats(const torch::Tensor& logits, const torch::Tensor& targets, torch::Tensor lse,
                       torch::Tensor target_logp, torch::Tensor entropy);
// Overwrites logits [R, V] with d(g_lp * logp_target + g_ent * entropy)/dlogits. g_lp / g_ent (fp32 [R]) may be
// undefined; entropy is needed only with g_ent.
void log_softmax_grad_(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                       const torch::Tensor& entropy, const torch::Tensor& g_lp, const torch::Tensor& g_ent);

// float8(x * scale) for a contiguous 2-D bf16/fp16/fp32 CUDA tensor x [R, C] and a device fp32 scalar `scale`, in
// one pass: the row-major [R, C] result when `row_major`, its transpose as a row-major [C, R] tensor when
// `transposed` (each undefined when not asked for). `float8_type` is e4m3fn or e5m2; values saturate. `amax`, when
// defined (one fp32 element on x's device), is raised to max |x| over the finite elements in the same pass (what
// delayed scaling records).
std::pair<torch::Tensor, torch::Tensor> fp8_scale_cast(const torch::Tensor& x, const torch::Tensor& scale,
                                                       c10::ScalarType float8_type, bool row_major, bool transposed,
                                                       const torch::Tensor& amax = torch::Tensor());

}  // namespace kernels
}  // namespace enginery
