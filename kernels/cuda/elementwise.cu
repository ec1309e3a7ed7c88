// SwiGLU, rotary embedding and fp32 gradient accumulation: one pass over memory each, fp32 arithmetic, one rounding.
#include "kernels/cuda/common.cuh"

namespace enginery {
namespace kernels {
namespace {

using detail::Pack;
using detail::from_float;
using detail::to_float;

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }

// Runs op(i) for every element index i, `Pack` elements at a time where all arrays are 16-byte aligned and n is a
// multiple of the pack, else one at a time.
template <typename T, typename Op>
__device__ __forceinline__ void for_each_element(int64_t n, bool vectorised, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vectorised) {
    for (int64_t p = tid; p < n / Pack<T>::kSize; p += stride) op(p, true);
  } else {
    for (int64_t i = tid; i < n; i += stride) op(i, false);
  }
}

template <typename T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                      int64_t n, bool vec) {
  constexpr int K = Pack<T>::kSize;
  for_each_element<T>(n, vec, [&](int64_t i, bool is_pack) {
    if (is_pack) {
      Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[i];
      Pack<T> u = reinterpret_cast<const Pack<T>*>(up)[i];
      Pack<T> o;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float x = to_float(g.v[k]);
        o.v[k] = from_float<T>(x * sigmoid(x) * to_float(u.v[k]));
      }
      reinterpret_cast<Pack<T>*>(out)[i] = o;
    } else {
      const float x = to_float(gate[i]);
      out[i] = from_float<T>(x * sigmoid(x) * to_float(up[i]));
    }
  });
}

template <typename T>
__device__ __forceinline__ void swiglu_grad(float dy, float x, float u, T& dgate, T& dup) {
  const float s = sigmoid(x);
  dup = from_float<T>(dy * x * s);
  dgate = from_float<T>(dy * u * s * (1.f + x * (1.f - s)));
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                       const T* __restrict__ up, T* __restrict__ grad_gate, T* __restrict__ grad_up,
                                       int64_t n, bool vec) {
  constexpr int K = Pack<T>::kSize;
  for_each_element<T>(n, vec, [&](int64_t i, bool is_pack) {
    if (is_pack) {
      Pack<T> dy = reinterpret_cast<const Pack<T>*>(grad)[i];
      Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[i];
      Pack<T> u = reinterpret_cast<const Pack<T>*>(up)[i];
      Pack<T> dg, du;
#pragma unroll
      for (int k = 0; k < K; ++k) swiglu_grad(to_float(dy.v[k]), to_float(g.v[k]), to_float(u.v[k]), dg.v[k], du.v[k]);
      reinterpret_cast<Pack<T>*>(grad_gate)[i] = dg;
      reinterpret_cast<Pack<T>*>(grad_up)[i] = du;
    } else {
      swiglu_grad(to_float(grad[i]), to_float(gate[i]), to_float(up[i]), grad_gate[i], grad_up[i]);
    }
  });
}

template <typename T, typename TT>
__global__ void rope_kernel(const T* __restrict__ x, const TT* __restrict__ cos, const TT* __restrict__ sin,
                            T* __restrict__ out, int64_t rows, int64_t heads, int64_t dim, bool transpose) {
  const int64_t half = dim / 2;
  const int64_t total = rows * heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t j = i % half;
    const int64_t row_head = i / half;
    const int64_t row = row_head / heads;
    const T* xv = x + row_head * dim;
    T* ov = out + row_head * dim;
    const TT* c = cos + row * dim;
    const TT* s = sin + row * dim;
    const float lo = to_float(xv[j]), hi = to_float(xv[j + half]);
    const float c_lo = to_float(c[j]), c_hi = to_float(c[j + half]);
    const float s_lo = to_float(s[j]), s_hi = to_float(s[j + half]);
    if (!transpose) {
      ov[j] = from_float<T>(lo * c_lo - hi * s_lo);
      ov[j + half] = from_float<T>(hi * c_hi + lo * s_hi);
    } else {
      ov[j] = from_float<T>(lo * c_lo + hi * s_hi);
      ov[j + half] = from_float<T>(hi * c_hi - lo * s_lo);
    }
  }
}

template <typename T>
__global__ void accumulate_kernel(float* __restrict__ dst, const T* __restrict__ src, int64_t n, bool vec,
                                  bool overwrite) {
  constexpr int K = Pack<T>::kSize;
  for_each_element<T>(n, vec, [&](int64_t i, bool is_pack) {
    if (is_pack) {
      Pack<T> s = reinterpret_cast<const Pack<T>*>(src)[i];
      float4* d = reinterpret_cast<float4*>(dst + i * K);
#pragma unroll
      for (int q = 0; q < K / 4; ++q) {
        float4 a = overwrite ? make_float4(0.f, 0.f, 0.f, 0.f) : d[q];
        a.x += to_float(s.v[4 * q]);
        a.y += to_float(s.v[4 * q + 1]);
        a.z += to_float(s.v[4 * q + 2]);
        a.w += to_float(s.v[4 * q + 3]);
        d[q] = a;
      }
    } else {
      dst[i] = (overwrite ? 0.f : dst[i]) + to_float(src[i]);
    }
  });
}

template <typename T>
bool packable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % Pack<T>::kSize != 0) return false;
  for (const void* p : ptrs) {
    if (!detail::aligned16(p)) return false;
  }
  return true;
}

}  // namespace

namespace launch {

void swiglu_forward(Elem e, const void* gate, const void* up, void* out, int64_t n, void* stream) {
  detail::dispatch(e, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = packable<T>(n, {gate, up, out});
    const int64_t items = vec ? n / Pack<T>::kSize : n;
    swiglu_forward_kernel<T><<<detail::grid_for(items), 256, 0, detail::as_stream(stream)>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), n, vec);
  });
  detail::check_launch("swiglu_forward");
}

void swiglu_backward(Elem e, const void* grad, const void* gate, const void* up, void* grad_gate, void* grad_up,
                     int64_t n, void* stream) {
  detail::dispatch(e, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = packable<T>(n, {grad, gate, up, grad_gate, grad_up});
    const int64_t items = vec ? n / Pack<T>::kSize : n;
    swiglu_backward_kernel<T><<<detail::grid_for(items), 256, 0, detail::as_stream(stream)>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), n, vec);
  });
  detail::check_launch("swiglu_backward");
}

void rope(Elem e, Elem table_elem, const void* x, const void* cos, const void* sin, void* out, int64_t rows,
          int64_t heads, int64_t dim, bool transpose, void* stream) {
  const int64_t items = rows * heads * (dim / 2);
  detail::dispatch(e, [&](auto tag) {
    using T = decltype(tag);
    if (table_elem == Elem::kFloat) {
      rope_kernel<T, float><<<detail::grid_for(items), 256, 0, detail::as_stream(stream)>>>(
          static_cast<const T*>(x), static_cast<const float*>(cos), static_cast<const float*>(sin),
          static_cast<T*>(out), rows, heads, dim, transpose);
    } else {
      rope_kernel<T, T><<<detail::grid_for(items), 256, 0, detail::as_stream(stream)>>>(
          static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(out),
          rows, heads, dim, transpose);
    }
  });
  detail::check_launch("rope");
}

void accumulate_fp32(Elem src_elem, float* dst, const void* src, int64_t n, bool overwrite, void* stream) {
  detail::dispatch(src_elem, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = packable<T>(n, {dst, src}) && n % 4 == 0;
    const int64_t items = vec ? n / Pack<T>::kSize : n;
    accumulate_kernel<T><<<detail::grid_for(items), 256, 0, detail::as_stream(stream)>>>(
        dst, static_cast<const T*>(src), n, vec, overwrite);
  });
  detail::check_launch("accumulate_fp32");
}

}  // namespace launch
}  // namespace kernels
}  // namespace enginery
