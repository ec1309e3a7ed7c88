// AdamW over one flat fp32 shard with its gradient in fp32 or bf16: one pass that reads param, grad and both moments
// and writes param and moments (26 bytes an element with a bf16 gradient; ATen's fused AdamW moves 32 with fp32
// gradients and a grad scale, since it writes the unscaled gradient back). The math is torch.optim.AdamW's.
#include "kernels/cuda/common.cuh"

namespace enginery {
namespace kernels {
namespace {

using detail::to_float;

// Four elements of one array, loaded and stored in one access.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

struct AdamCoefficients {
  float lr, beta1, beta2, eps, decay_factor, step_size, inv_bias2_sqrt;
};

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamCoefficients& c,
                                              float inv_grad_scale) {
  g *= inv_grad_scale;
  p *= c.decay_factor;
  m = c.beta1 * m + (1.f - c.beta1) * g;
  v = c.beta2 * v + (1.f - c.beta2) * g * g;
  const float denom = sqrtf(v) * c.inv_bias2_sqrt + c.eps;
  p -= c.step_size * m / denom;
}

template <typename G>
__global__ void adamw_kernel(float* __restrict__ param, const G* __restrict__ grad, float* __restrict__ exp_avg,
                             float* __restrict__ exp_avg_sq, int64_t n, bool vec, const float* __restrict__ step,
                             double lr, double beta1, double beta2, double eps, double weight_decay,
                             const float* __restrict__ grad_scale, const float* __restrict__ found_inf) {
  if (found_inf != nullptr && *found_inf != 0.f) return;
  // The step counter lives on the device (advanced by the caller unless skipped), so the bias corrections are
  // formed here, in double, as torch does.
  const double t = static_cast<double>(*step);
  AdamCoefficients c;
  c.lr = static_cast<float>(lr);
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.eps = static_cast<float>(eps);
  c.decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  c.step_size = static_cast<float>(lr / (1.0 - pow(beta1, t)));
  c.inv_bias2_sqrt = static_cast<float>(1.0 / sqrt(1.0 - pow(beta2, t)));
  const float inv_grad_scale = grad_scale != nullptr ? 1.f / *grad_scale : 1.f;

  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    for (int64_t q = tid; q < n / 4; q += stride) {
      float4 p = reinterpret_cast<float4*>(param)[q];
      float4 m = reinterpret_cast<float4*>(exp_avg)[q];
      float4 v = reinterpret_cast<float4*>(exp_avg_sq)[q];
      const Quad<G> g = reinterpret_cast<const Quad<G>*>(grad)[q];
      adamw_element(p.x, to_float(g.v[0]), m.x, v.x, c, inv_grad_scale);
      adamw_element(p.y, to_float(g.v[1]), m.y, v.y, c, inv_grad_scale);
      adamw_element(p.z, to_float(g.v[2]), m.z, v.z, c, inv_grad_scale);
      adamw_element(p.w, to_float(g.v[3]), m.w, v.w, c, inv_grad_scale);
      reinterpret_cast<float4*>(param)[q] = p;
      reinterpret_cast<float4*>(exp_avg)[q] = m;
      reinterpret_cast<float4*>(exp_avg_sq)[q] = v;
    }
  } else {
    for (int64_t i = tid; i < n; i += stride) {
      adamw_element(param[i], to_float(grad[i]), exp_avg[i], exp_avg_sq[i], c, inv_grad_scale);
    }
  }
}

}  // namespace

namespace launch {

void adamw_step(Elem grad_elem, float* param, const void* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const float* step, double lr, double beta1, double beta2, double eps, double weight_decay,
                const float* grad_scale, const float* found_inf, void* stream) {
  detail::dispatch(grad_elem, [&](auto tag) {
    using G = decltype(tag);
    const bool vec = n % 4 == 0 && detail::aligned16(param) && detail::aligned16(exp_avg) &&
                     detail::aligned16(exp_avg_sq) && reinterpret_cast<uintptr_t>(grad) % (4 * sizeof(G)) == 0;
    const int64_t items = vec ? n / 4 : n;
    adamw_kernel<G><<<detail::grid_for(items), 256, 0, detail::as_stream(stream)>>>(
        param, static_cast<const G*>(grad), exp_avg, exp_avg_sq, n, vec, step, lr, beta1, beta2, eps, weight_decay,
        grad_scale, found_inf);
  });
  detail::check_launch("adamw_step");
}

}  // namespace launch
}  // namespace kernels
}  // namespace enginery
