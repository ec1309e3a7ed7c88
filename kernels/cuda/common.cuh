#pragma once
// Element conversions, 16-byte packs and launch helpers shared by the .cu files.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/launchers.h"

namespace enginery {
namespace kernels {
namespace detail {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Elements per 16-byte access: every kernel moves memory in these.
template <typename T>
struct Pack {
  static constexpr int kSize = 16 / sizeof(T);
  alignas(16) T v[kSize];
};

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("enginery kernel ") + kernel + " failed to launch: " + cudaGetErrorString(err));
  }
}

// Enough blocks of 256 threads to fill an H200-sized GPU several times over; grid-stride loops do the rest.
inline int grid_for(int64_t work_items, int threads = 256) {
  const int64_t blocks = (work_items + threads - 1) / threads;
  return static_cast<int>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

// Calls f(T{}) with the C++ type of `e`.
template <typename F>
void dispatch(launch::Elem e, F&& f) {
  switch (e) {
    case launch::Elem::kBFloat16: f(__nv_bfloat16{}); return;
    case launch::Elem::kHalf: f(__half{}); return;
    case launch::Elem::kFloat: f(float{}); return;
  }
}

}  // namespace detail
}  // namespace kernels
}  // namespace enginery
