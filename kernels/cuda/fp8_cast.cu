// Scale and cast to float8 in one pass, writing the row-major result, its transpose, or both (models/fp8_linear.h
// needs both layouts of every GEMM operand it quantizes). Tiles of 64 x 64: each block reads its tile once
// (coalesced along the columns), writes the row-major bytes straight away and the transposed ones through shared
// memory, so both writes are coalesced too. Where both dimensions are multiples of 8 each thread moves 8
// elements per access (16-byte loads of bf16, 8-byte stores); otherwise one. The conversion saturates at the
// format's largest finite value. With `amax` given, the same pass also records max |x| over the finite elements
// there (atomicMax over the blocks), the amax delayed scaling uses for the next casts of this operand.
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace enginery {
namespace kernels {
namespace {

using detail::Pack;
using detail::to_float;

constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per thread access in the vector kernel

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ uint8_t to_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, F);
}

// |v| as the amax records it: an inf would make every later scale from the history 0 (and its casts NaN), so only
// finite values count; the cast itself saturates an inf at the format's largest value.
__device__ __forceinline__ float recordable(float v) { return isfinite(v) ? fabsf(v) : 0.0f; }

// The block's largest `v` into *amax (all kThreads threads call it; `tid` 0..kThreads-1). Non-negative floats order
// as their bit patterns, so an unsigned atomicMax on the bits is a float max; NaN is dropped by fmaxf.
__device__ __forceinline__ void block_max_into(float v, int tid, float* amax) {
  __shared__ float warp_max[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (tid % 32 == 0) warp_max[tid / 32] = v;
  __syncthreads();
  if (tid < 32) {
    v = tid < kThreads / 32 ? warp_max[tid] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (tid == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(v));
  }
}

// Any shape: blockDim = (64, 4), one element per access.
template <typename T, __nv_fp8_interpretation_t F>
__global__ void fp8_scale_cast_kernel(const T* __restrict__ src, int64_t rows, int64_t cols,
                                      const float* __restrict__ scale, uint8_t* __restrict__ out,
                                      uint8_t* __restrict__ out_t, float* __restrict__ amax) {
  __shared__ uint8_t tile[kTile][kTile + 4];  // the padding spreads a column's bytes over banks
  const float s = *scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  float largest = 0.0f;
  for (int r = ty; r < kTile; r += blockDim.y) {
    const int64_t row = row0 + r, col = col0 + tx;
    if (row < rows && col < cols) {
      const float v = to_float(src[row * cols + col]);
      largest = fmaxf(largest, recordable(v));
      const uint8_t q = to_fp8<F>(v * s);
      if (out != nullptr) out[row * cols + col] = q;
      tile[r][tx] = q;
    }
  }
  if (amax != nullptr) block_max_into(largest, ty * kTile + tx, amax);
  if (out_t == nullptr) return;
  __syncthreads();
  // out_t[c][r] = q[r][c]: now tx walks the rows of the tile so consecutive threads write consecutive bytes.
  for (int c = ty; c < kTile; c += blockDim.y) {
    const int64_t col = col0 + c, row = row0 + tx;
    if (row < rows && col < cols) out_t[col * rows + row] = tile[tx][c];
  }
}

// rows and cols multiples of 8, src 16-byte and outputs 8-byte aligned: 256 threads, each 8 consecutive elements
// of a row when reading, 8 consecutive rows of a column when writing the transpose.
template <typename T, __nv_fp8_interpretation_t F>
__global__ void fp8_scale_cast_vec_kernel(const T* __restrict__ src, int64_t rows, int64_t cols,
                                          const float* __restrict__ scale, uint8_t* __restrict__ out,
                                          uint8_t* __restrict__ out_t, float* __restrict__ amax) {
  constexpr int kPacks = kVec / Pack<T>::kSize;
  __shared__ uint8_t tile[kTile][kTile + kVec];
  const float s = *scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int t = threadIdx.x;
  const int group = t % (kTile / kVec);  // which 8 columns of the tile
  float largest = 0.0f;
  for (int r = t / (kTile / kVec); r < kTile; r += kThreads / (kTile / kVec)) {
    const int64_t row = row0 + r, col = col0 + group * kVec;
    if (row >= rows || col >= cols) continue;
    const Pack<T>* in = reinterpret_cast<const Pack<T>*>(src + row * cols + col);
    union {
      uint8_t b[kVec];
      uint2 word;
    } q;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Pack<T> v = in[p];
#pragma unroll
      for (int k = 0; k < Pack<T>::kSize; ++k) {
        const float x = to_float(v.v[k]);
        largest = fmaxf(largest, recordable(x));
        q.b[p * Pack<T>::kSize + k] = to_fp8<F>(x * s);
      }
    }
    if (out != nullptr) *reinterpret_cast<uint2*>(out + row * cols + col) = q.word;
#pragma unroll
    for (int k = 0; k < kVec; ++k) tile[r][group * kVec + k] = q.b[k];
  }
  if (amax != nullptr) block_max_into(largest, t, amax);
  if (out_t == nullptr) return;
  __syncthreads();
  for (int item = t; item < kTile * (kTile / kVec); item += kThreads) {
    const int c = item / (kTile / kVec), rows_from = (item % (kTile / kVec)) * kVec;
    const int64_t col = col0 + c, row = row0 + rows_from;
    if (row >= rows || col >= cols) continue;
    union {
      uint8_t b[kVec];
      uint2 word;
    } q;
#pragma unroll
    for (int k = 0; k < kVec; ++k) q.b[k] = tile[rows_from + k][c];
    *reinterpret_cast<uint2*>(out_t + col * rows + row) = q.word;
  }
}

bool aligned(const void* p, uintptr_t bytes) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <__nv_fp8_interpretation_t F, typename T>
void launch_cast(const T* src, int64_t rows, int64_t cols, const float* scale, void* out, void* out_t, float* amax,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  auto* o = static_cast<uint8_t*>(out);
  auto* ot = static_cast<uint8_t*>(out_t);
  if (rows % kVec == 0 && cols % kVec == 0 && aligned(src, 16) && aligned(out, 8) && aligned(out_t, 8)) {
    fp8_scale_cast_vec_kernel<T, F><<<grid, kThreads, 0, stream>>>(src, rows, cols, scale, o, ot, amax);
  } else {
    fp8_scale_cast_kernel<T, F><<<grid, dim3(kTile, kThreads / kTile), 0, stream>>>(src, rows, cols, scale, o, ot,
                                                                                     amax);
  }
}

}  // namespace

namespace launch {

void fp8_scale_cast(Elem src_elem, const void* src, int64_t rows, int64_t cols, const float* scale, bool e5m2,
                    void* out, void* out_t, float* amax, void* stream) {
  detail::dispatch(src_elem, [&](auto t) {
    using T = decltype(t);
    const T* typed = static_cast<const T*>(src);
    if (e5m2) {
      launch_cast<__NV_E5M2>(typed, rows, cols, scale, out, out_t, amax, detail::as_stream(stream));
    } else {
      launch_cast<__NV_E4M3>(typed, rows, cols, scale, out, out_t, amax, detail::as_stream(stream));
    }
  });
  detail::check_launch("fp8_scale_cast");
}

}  // namespace launch
}  // namespace kernels
}  // namespace enginery
