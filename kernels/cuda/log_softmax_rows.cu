// Row-wise log-softmax statistics of the language-model head's logits and their gradient, without an fp32 copy of
// the [rows x vocab] logits: one read of the logits forward, one read and one in-place write backward. One block
// per row; each thread keeps an online (max, sum of exp, sum of exp * z) over its 16-byte packs.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace enginery {
namespace kernels {
namespace {

using detail::Pack;
using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

struct RowStats {
  float max;   // running maximum
  float sum;   // sum exp(z - max)
  float zsum;  // sum exp(z - max) * z (entropy only)
};

__device__ __forceinline__ RowStats merge(RowStats a, RowStats b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  const float m = fmaxf(a.max, b.max);
  const float fa = __expf(a.max - m), fb = __expf(b.max - m);
  return {m, a.sum * fa + b.sum * fb, a.zsum * fa + b.zsum * fb};
}

template <bool kEntropy>
__device__ __forceinline__ void add_values(RowStats& st, const float* z, int count) {
  float mx = z[0];
  for (int k = 1; k < count; ++k) mx = fmaxf(mx, z[k]);
  if (mx > st.max) {
    const float f = __expf(st.max - mx);
    st.sum *= f;
    if (kEntropy) st.zsum *= f;
    st.max = mx;
  }
  for (int k = 0; k < count; ++k) {
    const float e = __expf(z[k] - st.max);
    st.sum += e;
    if (kEntropy) st.zsum += e * z[k];
  }
}

__device__ RowStats block_merge(RowStats st) {
  for (int offset = 16; offset > 0; offset /= 2) {
    RowStats other{__shfl_xor_sync(0xffffffff, st.max, offset), __shfl_xor_sync(0xffffffff, st.sum, offset),
                   __shfl_xor_sync(0xffffffff, st.zsum, offset)};
    st = merge(st, other);
  }
  __shared__ RowStats warp_stats[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_stats[warp] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) st = merge(st, warp_stats[w]);
    warp_stats[0] = st;
  }
  __syncthreads();
  return warp_stats[0];
}

template <typename T, bool kEntropy>
__global__ void __launch_bounds__(kThreads) stats_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                                                         int64_t vocab, bool vec, float* __restrict__ lse,
                                                         float* __restrict__ target_logp, float* __restrict__ entropy) {
  constexpr int K = Pack<T>::kSize;
  const int64_t row = blockIdx.x;
  const T* z = logits + row * vocab;
  RowStats st{-INFINITY, 0.f, 0.f};
  float buf[K];
  if (vec) {
    const Pack<T>* packs = reinterpret_cast<const Pack<T>*>(z);
    for (int64_t p = threadIdx.x; p < vocab / K; p += kThreads) {
      const Pack<T> v = packs[p];
#pragma unroll
      for (int k = 0; k < K; ++k) buf[k] = to_float(v.v[k]);
      add_values<kEntropy>(st, buf, K);
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      buf[0] = to_float(z[j]);
      add_values<kEntropy>(st, buf, 1);
    }
  }
  st = block_merge(st);
  if (threadIdx.x == 0) {
    const float l = st.max + logf(st.sum);
    lse[row] = l;
    const int64_t t = targets[row];
    target_logp[row] = (t >= 0 && t < vocab) ? to_float(z[t]) - l : NAN;
    if (kEntropy) entropy[row] = l - st.zsum / st.sum;
  }
}

template <typename T>
__device__ __forceinline__ float logit_grad(float z, bool is_target, float lse, float h, float gl, float ge) {
  const float logp = z - lse;
  const float p = __expf(logp);
  return (is_target ? gl : 0.f) - gl * p - ge * p * (logp + h);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) grad_kernel(T* __restrict__ logits, const int64_t* __restrict__ targets,
                                                        int64_t vocab, bool vec, const float* __restrict__ lse,
                                                        const float* __restrict__ entropy,
                                                        const float* __restrict__ g_lp,
                                                        const float* __restrict__ g_ent) {
  constexpr int K = Pack<T>::kSize;
  const int64_t row = blockIdx.x;
  T* z = logits + row * vocab;
  const float l = lse[row];
  const float gl = g_lp != nullptr ? g_lp[row] : 0.f;
  const float ge = g_ent != nullptr ? g_ent[row] : 0.f;
  const float h = g_ent != nullptr ? entropy[row] : 0.f;
  const int64_t t = targets[row];
  if (vec) {
    Pack<T>* packs = reinterpret_cast<Pack<T>*>(z);
    for (int64_t p = threadIdx.x; p < vocab / K; p += kThreads) {
      Pack<T> v = packs[p];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        v.v[k] = from_float<T>(logit_grad<T>(to_float(v.v[k]), p * K + k == t, l, h, gl, ge));
      }
      packs[p] = v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      z[j] = from_float<T>(logit_grad<T>(to_float(z[j]), j == t, l, h, gl, ge));
    }
  }
}

template <typename T>
bool rows_packable(const void* logits, int64_t vocab) {
  return detail::aligned16(logits) && vocab % Pack<T>::kSize == 0;
}

}  // namespace

namespace launch {

void log_softmax_stats(Elem e, const void* logits, const int64_t* targets, int64_t rows, int64_t vocab, float* lse,
                       float* target_logp, float* entropy, void* stream) {
  if (rows == 0) return;
  detail::dispatch(e, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = rows_packable<T>(logits, vocab);
    const auto* z = static_cast<const T*>(logits);
    if (entropy != nullptr) {
      stats_kernel<T, true><<<rows, kThreads, 0, detail::as_stream(stream)>>>(z, targets, vocab, vec, lse,
                                                                               target_logp, entropy);
    } else {
      stats_kernel<T, false><<<rows, kThreads, 0, detail::as_stream(stream)>>>(z, targets, vocab, vec, lse,
                                                                                target_logp, nullptr);
    }
  });
  detail::check_launch("log_softmax_stats");
}

void log_softmax_grad(Elem e, void* logits, const int64_t* targets, int64_t rows, int64_t vocab, const float* lse,
                      const float* entropy, const float* g_lp, const float* g_ent, void* stream) {
  if (rows == 0) return;
  detail::dispatch(e, [&](auto tag) {
    using T = decltype(tag);
    grad_kernel<T><<<rows, kThreads, 0, detail::as_stream(stream)>>>(
        static_cast<T*>(logits), targets, vocab, rows_packable<T>(logits, vocab), lse, entropy, g_lp, g_ent);
  });
  detail::check_launch("log_softmax_grad");
}

}  // namespace launch
}  // namespace kernels
}  // namespace enginery
