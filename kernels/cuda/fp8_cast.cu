// Scale and cast to float8 in one pass, writing the row-major result, its transpose, or both (models/fp8_linear.h
// needs both layouts of every GEMM operand it quantizes). Tiles of 64 x 64: each block reads its tile once
// (coalesced along the columns), writes the row-major bytes straight away and the transposed ones through shared
// memory, so both writes are coalesced too. The conversion saturates at the format's largest finite value.
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"

namespace enginery {
namespace kernels {
namespace {

using detail::to_float;

constexpr int kTile = 64;
constexpr int kRowsPerPass = 4;  // blockDim = (kTile, kRowsPerPass)

template <typename T, typename F8>
__global__ void fp8_scale_cast_kernel(const T* __restrict__ src, int64_t rows, int64_t cols,
                                      const float* __restrict__ scale, F8* __restrict__ out, F8* __restrict__ out_t) {
  __shared__ F8 tile[kTile][kTile + 4];  // the padding spreads a column's bytes over banks
  const float s = *scale;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int r = ty; r < kTile; r += kRowsPerPass) {
    const int64_t row = row0 + r, col = col0 + tx;
    if (row < rows && col < cols) {
      const F8 q(to_float(src[row * cols + col]) * s);
      if (out != nullptr) out[row * cols + col] = q;
      tile[r][tx] = q;
    }
  }
  if (out_t == nullptr) return;
  __syncthreads();
  // out_t[c][r] = q[r][c]: now tx walks the rows of the tile so consecutive threads write consecutive bytes.
  for (int c = ty; c < kTile; c += kRowsPerPass) {
    const int64_t col = col0 + c, row = row0 + tx;
    if (row < rows && col < cols) out_t[col * rows + row] = tile[tx][c];
  }
}

}  // namespace

namespace launch {

void fp8_scale_cast(Elem src_elem, const void* src, int64_t rows, int64_t cols, const float* scale, bool e5m2,
                    void* out, void* out_t, void* stream) {
  const dim3 block(kTile, kRowsPerPass);
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile), static_cast<unsigned>((rows + kTile - 1) / kTile));
  detail::dispatch(src_elem, [&](auto t) {
    using T = decltype(t);
    if (e5m2) {
      fp8_scale_cast_kernel<T, __nv_fp8_e5m2><<<grid, block, 0, detail::as_stream(stream)>>>(
          static_cast<const T*>(src), rows, cols, scale, static_cast<__nv_fp8_e5m2*>(out),
          static_cast<__nv_fp8_e5m2*>(out_t));
    } else {
      fp8_scale_cast_kernel<T, __nv_fp8_e4m3><<<grid, block, 0, detail::as_stream(stream)>>>(
          static_cast<const T*>(src), rows, cols, scale, static_cast<__nv_fp8_e4m3*>(out),
          static_cast<__nv_fp8_e4m3*>(out_t));
    }
  });
  detail::check_launch("fp8_scale_cast");
}

}  // namespace launch
}  // namespace kernels
}  // namespace enginery
