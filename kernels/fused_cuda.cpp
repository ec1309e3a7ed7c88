#include "kernels/fused_cuda.h"

#include <stdexcept>

#include "host_api/error.h"

#ifdef ENGINERY_HAS_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/launchers.h"
#include "support/torch_compat.h"
#endif

namespace enginery {
namespace kernels {

#ifdef ENGINERY_HAS_CUDA_KERNELS

namespace {

launch::Elem elem_of(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kBFloat16: return launch::Elem::kBFloat16;
    case torch::kHalf: return launch::Elem::kHalf;
    case torch::kFloat: return launch::Elem::kFloat;
    default:
      throw enginery::EngineryError(std::string("unsupported dtype ") + c10::toString(t.scalar_type()),
                                    "enginery kernels", "bfloat16, half, float");
  }
}

void* stream() { return static_cast<void*>(at::cuda::getCurrentCUDAStream().stream()); }

void require(bool ok, const char* what) {
  if (!ok) throw enginery::EngineryError(what, "enginery kernels");
}

}  // namespace

bool compiled() { return true; }
bool available(Kernel k) { return kernel_enabled(k); }

bool applies(const torch::Tensor& t, Kernel k) {
  const bool half_precision = t.defined() && (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf);
  return available(k) && half_precision && t.is_cuda();
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  const c10::cuda::CUDAGuard guard(gate.device());
  require(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(), "swiglu: gate and up differ");
  auto g = gate.contiguous(), u = up.contiguous();
  auto out = torch::empty_like(g);
  launch::swiglu_forward(elem_of(g), g.data_ptr(), u.data_ptr(), out.data_ptr(), g.numel(), stream());
  return out;
}

std::pair<torch::Tensor, torch::Tensor> swiglu_backward(const torch::Tensor& grad, const torch::Tensor& gate,
                                                        const torch::Tensor& up) {
  const c10::cuda::CUDAGuard guard(gate.device());
  auto dy = grad.to(gate.scalar_type()).contiguous(), g = gate.contiguous(), u = up.contiguous();
  require(dy.sizes() == g.sizes() && g.sizes() == u.sizes(), "swiglu_backward: shapes differ");
  auto grad_gate = torch::empty_like(g), grad_up = torch::empty_like(g);
  launch::swiglu_backward(elem_of(g), dy.data_ptr(), g.data_ptr(), u.data_ptr(), grad_gate.data_ptr(),
                          grad_up.data_ptr(), g.numel(), stream());
  return {grad_gate, grad_up};
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool transpose) {
  const c10::cuda::CUDAGuard guard(x.device());
  require(x.dim() == 4 && cos.dim() == 3 && cos.sizes() == sin.sizes() && x.size(0) == cos.size(0) &&
              x.size(1) == cos.size(1) && x.size(3) == cos.size(2) && x.size(3) % 2 == 0,
          "rope: x must be [B, T, heads, D] and cos/sin [B, T, D] with even D");
  auto xc = x.contiguous();
  auto table_dtype = cos.scalar_type() == torch::kFloat ? torch::kFloat : x.scalar_type();
  auto c = cos.to(table_dtype).contiguous(), s = sin.to(table_dtype).contiguous();
  auto out = torch::empty_like(xc);
  launch::rope(elem_of(xc), elem_of(c), xc.data_ptr(), c.data_ptr(), s.data_ptr(), out.data_ptr(),
               x.size(0) * x.size(1), x.size(2), x.size(3), transpose, stream());
  return out;
}

void accumulate_(torch::Tensor& dst, const torch::Tensor& src, bool overwrite) {
  const c10::cuda::CUDAGuard guard(dst.device());
  require(dst.scalar_type() == torch::kFloat && dst.is_contiguous() && dst.numel() == src.numel(),
          "accumulate_: dst must be contiguous fp32 with src's number of elements");
  auto s = src.contiguous();
  launch::accumulate_fp32(elem_of(s), dst.data_ptr<float>(), s.data_ptr(), s.numel(), overwrite, stream());
}

void adamw_(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
            const torch::Tensor& step, double lr, double beta1, double beta2, double eps, double weight_decay,
            const torch::Tensor& grad_scale, const torch::Tensor& found_inf) {
  const c10::cuda::CUDAGuard guard(param.device());
  auto fp32_contiguous = [](const torch::Tensor& t) {
    return t.is_cuda() && t.scalar_type() == torch::kFloat && t.is_contiguous();
  };
  require(fp32_contiguous(param) && fp32_contiguous(exp_avg) && fp32_contiguous(exp_avg_sq) &&
              exp_avg.numel() == param.numel() && exp_avg_sq.numel() == param.numel(),
          "adamw_: param and moments must be contiguous fp32 CUDA tensors of one size");
  require(grad.is_cuda() && grad.is_contiguous() && grad.numel() == param.numel() &&
              (grad.scalar_type() == torch::kFloat || grad.scalar_type() == torch::kBFloat16),
          "adamw_: grad must be a contiguous fp32 or bf16 CUDA tensor of the param's size");
  auto scalar = [](const torch::Tensor& t) -> const float* {
    if (!t.defined()) return nullptr;
    require(t.is_cuda() && t.scalar_type() == torch::kFloat && t.numel() == 1,
            "adamw_: step, grad_scale and found_inf must be one-element fp32 CUDA tensors");
    return t.data_ptr<float>();
  };
  require(step.defined(), "adamw_: the step counter is required");
  launch::adamw_step(elem_of(grad), param.data_ptr<float>(), grad.data_ptr(), exp_avg.data_ptr<float>(),
                     exp_avg_sq.data_ptr<float>(), param.numel(), scalar(step), lr, beta1, beta2, eps, weight_decay,
                     scalar(grad_scale), scalar(found_inf), stream());
}

void log_softmax_stats(const torch::Tensor& logits, const torch::Tensor& targets, torch::Tensor lse,
                       torch::Tensor target_logp, torch::Tensor entropy) {
  const c10::cuda::CUDAGuard guard(logits.device());
  require(logits.dim() == 2 && logits.is_contiguous(), "log_softmax_stats: logits must be contiguous [R, V]");
  require(lse.is_contiguous() && target_logp.is_contiguous() && lse.scalar_type() == torch::kFloat &&
              target_logp.scalar_type() == torch::kFloat && (!entropy.defined() || entropy.is_contiguous()),
          "log_softmax_stats: outputs must be contiguous fp32");
  auto t = targets.to(torch::kLong).contiguous();
  launch::log_softmax_stats(elem_of(logits), logits.data_ptr(), t.data_ptr<int64_t>(), logits.size(0),
                            logits.size(1), lse.data_ptr<float>(), target_logp.data_ptr<float>(),
                            entropy.defined() ? entropy.data_ptr<float>() : nullptr, stream());
}

void log_softmax_grad_(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                       const torch::Tensor& entropy, const torch::Tensor& g_lp, const torch::Tensor& g_ent) {
  const c10::cuda::CUDAGuard guard(logits.device());
  require(logits.dim() == 2 && logits.is_contiguous(), "log_softmax_grad_: logits must be contiguous [R, V]");
  auto t = targets.to(torch::kLong).contiguous();
  auto f32 = [](const torch::Tensor& v) { return v.defined() ? v.to(torch::kFloat).contiguous() : v; };
  auto l = f32(lse), h = f32(entropy), gl = f32(g_lp), ge = f32(g_ent);
  require(!ge.defined() || h.defined(), "log_softmax_grad_: an entropy gradient needs the entropy");
  launch::log_softmax_grad(elem_of(logits), logits.data_ptr(), t.data_ptr<int64_t>(), logits.size(0),
                           logits.size(1), l.data_ptr<float>(), h.defined() ? h.data_ptr<float>() : nullptr,
                           gl.defined() ? gl.data_ptr<float>() : nullptr, ge.defined() ? ge.data_ptr<float>() : nullptr,
                           stream());
}

std::pair<torch::Tensor, torch::Tensor> fp8_scale_cast(const torch::Tensor& x, const torch::Tensor& scale,
                                                       c10::ScalarType float8_type, bool row_major, bool transposed,
                                                       const torch::Tensor& amax) {
  const c10::cuda::CUDAGuard guard(x.device());
  require(!amax.defined() || (amax.device() == x.device() && amax.scalar_type() == torch::kFloat &&
                              amax.numel() == 1 && amax.is_contiguous()),
          "fp8_scale_cast: amax must be one contiguous fp32 element on x's device");
  require(x.dim() == 2 && x.is_contiguous(), "fp8_scale_cast: x must be a contiguous matrix");
  require(scale.is_cuda() && scale.scalar_type() == torch::kFloat && scale.numel() == 1,
          "fp8_scale_cast: scale must be one fp32 element on the device");
  const bool e5m2 = float8_type == compat::float8_e5m2();
  require(e5m2 || float8_type == compat::float8_e4m3(), "fp8_scale_cast: float8_type must be e4m3fn or e5m2");
  const int64_t rows = x.size(0), cols = x.size(1);
  torch::Tensor out, out_t;
  if (row_major) out = torch::empty({rows, cols}, x.options().dtype(float8_type));
  if (transposed) out_t = torch::empty({cols, rows}, x.options().dtype(float8_type));
  if (rows > 0 && cols > 0 && (row_major || transposed)) {
    launch::fp8_scale_cast(elem_of(x), x.data_ptr(), rows, cols, scale.data_ptr<float>(), e5m2,
                           row_major ? out.data_ptr() : nullptr, transposed ? out_t.data_ptr() : nullptr,
                           amax.defined() ? amax.data_ptr<float>() : nullptr, stream());
  }
  return {out, out_t};
}

#else  // no CUDA kernels in this build

namespace {
[[noreturn]] void not_built(const char* what) {
  throw enginery::EngineryError(std::string(what) + " called in a build without CUDA kernels", "enginery kernels",
                                "callers that check kernels::applies first");
}
}  // namespace

bool compiled() { return false; }
bool available(Kernel) { return false; }
bool applies(const torch::Tensor&, Kernel) { return false; }
std::pair<torch::Tensor, torch::Tensor> fp8_scale_cast(const torch::Tensor&, const torch::Tensor&, c10::ScalarType,
                                                       bool, bool, const torch::Tensor&) {
  not_built("fp8_scale_cast");
}
torch::Tensor swiglu(const torch::Tensor&, const torch::Tensor&) { not_built("swiglu"); }
std::pair<torch::Tensor, torch::Tensor> swiglu_backward(const torch::Tensor&, const torch::Tensor&,
                                                        const torch::Tensor&) {
  not_built("swiglu_backward");
}
torch::Tensor rope(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, bool) { not_built("rope"); }
void accumulate_(torch::Tensor&, const torch::Tensor&, bool) { not_built("accumulate_"); }
void adamw_(torch::Tensor&, const torch::Tensor&, torch::Tensor&, torch::Tensor&, const torch::Tensor&, double, double,
            double, double, double, const torch::Tensor&, const torch::Tensor&) {
  not_built("adamw_");
}
void log_softmax_stats(const torch::Tensor&, const torch::Tensor&, torch::Tensor, torch::Tensor, torch::Tensor) {
  not_built("log_softmax_stats");
}
void log_softmax_grad_(torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                       const torch::Tensor&, const torch::Tensor&) {
  not_built("log_softmax_grad_");
}

#endif

}  // namespace kernels
}  // namespace enginery
