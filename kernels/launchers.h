#pragma once
// Launchers of enginery's CUDA kernels (kernels/cuda/*.cu). Plain C++ on purpose: the .cu files are compiled by
// nvcc without LibTorch, and the LibTorch-facing wrappers (kernels/fused_cuda.h) check shapes and dtypes first.
// Pointers are device pointers of contiguous arrays; `stream` is a cudaStream_t.
#include <cstdint>

namespace enginery {
namespace kernels {
namespace launch {

enum class Elem { kBFloat16, kHalf, kFloat };

// out = silu(gate) * up, computed in fp32, rounded once.
void swiglu_forward(Elem e, const void* gate, const void* up, void* out, int64_t n, void* stream);
// grad_gate = grad * up * silu'(gate), grad_up = grad * silu(gate).
void swiglu_backward(Elem e, const void* grad, const void* gate, const void* up, void* grad_gate, void* grad_up,
                     int64_t n, void* stream);

// Rotary embedding of x [rows, heads, dim] with tables cos/sin [rows, dim] (table_elem: kFloat or e):
// forward  out_lo = x_lo cos_lo - x_hi sin_lo,  out_hi = x_hi cos_hi + x_lo sin_hi;
// transpose (the backward) applies the transposed rotation.
void rope(Elem e, Elem table_elem, const void* x, const void* cos, const void* sin, void* out, int64_t rows,
          int64_t heads, int64_t dim, bool transpose, void* stream);

// dst[i] += src[i] for fp32 dst; with `overwrite`, dst[i] = src[i].
void accumulate_fp32(Elem src_elem, float* dst, const void* src, int64_t n, bool overwrite, void* stream);

// Per row of logits [rows, vocab]: lse = log sum exp, target_logp = z[target] - lse, and when entropy != nullptr
// the entropy lse - sum p z. All outputs fp32 [rows].
void log_softmax_stats(Elem e, const void* logits, const int64_t* targets, int64_t rows, int64_t vocab, float* lse,
                       float* target_logp, float* entropy, void* stream);

// In place: logits[r, j] <- d(g_lp[r] * logp[r, target] + g_ent[r] * H[r]) / dz[r, j]
//   = g_lp (onehot - p) - g_ent p (log p + H). g_lp / g_ent may be nullptr (treated as zero).
void log_softmax_grad(Elem e, void* logits, const int64_t* targets, int64_t rows, int64_t vocab, const float* lse,
                      const float* entropy, const float* g_lp, const float* g_ent, void* stream);

// One AdamW step (torch.optim.AdamW: decoupled decay, bias-corrected moments) over n fp32 elements whose gradient
// is grad_elem (kFloat or kBFloat16). `step` is the device step counter (already advanced); grad_scale divides the
// gradient and a non-zero found_inf skips the update (both device fp32 scalars, or nullptr).
void adamw_step(Elem grad_elem, float* param, const void* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const float* step, double lr, double beta1, double beta2, double eps, double weight_decay,
                const float* grad_scale, const float* found_inf, void* stream);

// q = float8(src * *scale) for src [rows, cols] (row-major), saturating at the format's largest finite value
// (e5m2: 57344, else e4m3: 448); writes q to `out` [rows, cols] and q^T to `out_t` [cols, rows], either may be
// nullptr. `scale` is a device fp32 scalar. `amax` (a device fp32 scalar, or nullptr) is raised to max |src| over
// the finite elements if below.
void fp8_scale_cast(Elem src_elem, const void* src, int64_t rows, int64_t cols, const float* scale, bool e5m2,
                    void* out, void* out_t, float* amax, void* stream);

}  // namespace launch
}  // namespace kernels
}  // namespace enginery
