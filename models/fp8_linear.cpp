// FP8 linears (models/fp8_linear.h). Operand layouts follow _scaled_mm's rule (a row-major, b column-major):
//   forward  y  [M, N] = x [M, K] @ w^T        b = w^T: w [N, K] row-major read transposed
//   dgrad    dx [M, K] = g [M, N] @ w          b = w [N, K] column-major: w's transposed quantization
//   wgrad    dw [N, K] = g^T [N, M] @ x        a = g^T row-major, b = x column-major: both transposed quantizations
// Each operand is quantized straight into the layout its GEMMs read (quantize_tensorwise), never copied after.
// Gradients use e5m2 (range over precision), everything else e4m3; _scaled_mm refuses e5m2 x e5m2, which never
// occurs. The forward accumulates with the fast (periodically promoted) mode, the backward GEMMs with the full one,
// as torchao's tensor-wise recipe does.
#include "models/fp8_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <tuple>

#include "kernels/fused_cuda.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double largest_finite(c10::ScalarType float8_type) {
  return float8_type == compat::float8_e5m2() ? 57344.0 : 448.0;
}

c10::ScalarType output_dtype(const torch::Tensor& x) {
  const auto device = x.device().type();
  return compat::autocast_enabled(device) ? compat::autocast_dtype(device) : x.scalar_type();
}

class Fp8LinearsFunction : public torch::autograd::Function<Fp8LinearsFunction> {
 public:
  // `site`: the Fp8SiteHistory's address (delayed scaling) or 0 (tensor-wise); saved_data holds IValues only, and
  // the layer that owns the histories outlives its graphs. `use`: an Fp8HistoryUse, for the forward's casts.
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, at::TensorList weights, int64_t site,
                               int64_t use) {
    const auto history_use = static_cast<Fp8HistoryUse>(use);
    const int64_t k = x.size(-1);
    const auto out_dtype = output_dtype(x);
    auto* history = reinterpret_cast<Fp8SiteHistory*>(site);
    if (history != nullptr) {
      history->weights.resize(weights.size());
      history->grads.resize(weights.size());
    }
    // x row-major for these GEMMs, x^T (x column-major) for the weight gradients: only the latter is kept.
    const Fp8Tensor qx = quantize_tensorwise(x.reshape({-1, k}).contiguous(), compat::float8_e4m3(), true, true,
                                             history != nullptr ? &history->input : nullptr, history_use);
    std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
    variable_list outputs;
    for (size_t i = 0; i < weights.size(); ++i) {
      const auto& w = weights[i];
      const Fp8Tensor qw = quantize_tensorwise(w, compat::float8_e4m3(), true, false,
                                               history != nullptr ? &history->weights[i] : nullptr, history_use);
      auto y = compat::scaled_mm(qx.data, qw.data.t(), qx.inv_scale, qw.inv_scale, out_dtype, /*fast_accum=*/true);
      out_shape.back() = w.size(0);
      outputs.push_back(y.view(out_shape));
    }
    std::vector<torch::Tensor> saved{qx.data_t, qx.inv_scale};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["site"] = site;
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto x_columns = saved[0].t();  // x [M, K] column-major
    const auto& x_inv_scale = saved[1];
    const auto x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const auto x_dtype = static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const size_t n = saved.size() - 2;
    auto* history = reinterpret_cast<Fp8SiteHistory*>(ctx->saved_data["site"].toInt());
    variable_list result(1 + n + 2);  // x, the weights, the site and the use (none)
    torch::Tensor dx;
    for (size_t i = 0; i < n; ++i) {
      if (!grads[i].defined()) continue;
      const auto& w = saved[2 + i];
      const auto g = grads[i].reshape({-1, w.size(0)}).contiguous();
      const Fp8Tensor qg = quantize_tensorwise(g, compat::float8_e5m2(), true, true,
                                               history != nullptr ? &history->grads[i] : nullptr);
      const Fp8Tensor qw = quantize_tensorwise(w, compat::float8_e4m3(), false, true,
                                               history != nullptr ? &history->weights[i] : nullptr);
      // dx = g @ w with w [N, K] column-major; dw = g^T @ x.
      auto d = compat::scaled_mm(qg.data, qw.data_t.t(), qg.inv_scale, qw.inv_scale, x_dtype, /*fast_accum=*/false);
      dx = dx.defined() ? dx.add_(d) : d;
      result[1 + i] = compat::scaled_mm(qg.data_t, x_columns, qg.inv_scale, x_inv_scale, w.scalar_type(),
                                        /*fast_accum=*/false);
    }
    if (dx.defined()) result[0] = dx.view(x_sizes);
    return result;
  }
};

bool multiple_of_16(int64_t n) { return n % 16 == 0; }

}  // namespace

Fp8Tensor quantize_tensorwise(const torch::Tensor& x, c10::ScalarType float8_type, bool row_major, bool transposed,
                              Fp8AmaxHistory* history, Fp8HistoryUse use) {
  torch::NoGradGuard no_grad;
  const bool fused = kernels::applies(x, kernels::Kernel::kFp8Cast) && x.dim() == 2 && x.is_contiguous();
  if (!fused) history = nullptr;  // only enginery's cast kernel records amaxes
  torch::Tensor scale;
  if (history != nullptr && use == Fp8HistoryUse::kReplay && history->last_scale.defined()) {
    scale = history->last_scale;
  } else {
    // amax in one pass (the inf-norm), in fp32, unless the history has one; an all-zero tensor gets a finite scale.
    auto amax = history != nullptr && history->amax.defined()
                    ? history->amax.max()
                    : torch::linalg_vector_norm(x, std::numeric_limits<double>::infinity(), at::OptionalIntArrayRef(),
                                                /*keepdim=*/false, torch::kFloat);
    // The 1/128 margin keeps x * scale inside the format after that product is rounded to x's dtype (bf16 rounds
    // by at most 2^-9 relative) on the ATen path, which has no saturating cast. With delayed scaling a value above
    // the history's amax saturates at the format's largest value (the kernel's conversion), as in other delayed
    // recipes.
    scale = (largest_finite(float8_type) * (1.0 - 1.0 / 128.0)) / amax.clamp_min(1e-12);
  }
  Fp8Tensor q;
  q.inv_scale = scale.reciprocal();
  if (fused) {
    torch::Tensor slot;
    if (history != nullptr && use == Fp8HistoryUse::kRecord) {
      history->last_scale = scale;
      if (!history->amax.defined()) history->amax = torch::zeros({kAmaxHistory}, x.options().dtype(torch::kFloat));
      slot = history->amax.narrow(0, history->next, 1);
      slot.zero_();  // after the scale above read it: this cast's amax replaces the oldest
      history->next = (history->next + 1) % kAmaxHistory;
    }
    std::tie(q.data, q.data_t) = kernels::fp8_scale_cast(x, scale, float8_type, row_major, transposed, slot);
    return q;
  }
  auto data = (x * scale).to(float8_type);
  if (transposed) q.data_t = data.t().contiguous();
  if (row_major) q.data = std::move(data);
  return q;
}

bool fp8_linears_apply(const torch::Tensor& x, const std::vector<torch::nn::Linear>& layers) {
  if (!x.is_cuda() || x.dim() < 2 || x.numel() == 0) return false;
  if (!multiple_of_16(x.numel() / x.size(-1)) || !multiple_of_16(x.size(-1))) return false;
  for (const auto& layer : layers) {
    if (!multiple_of_16(layer->weight.size(0)) || !layer->weight.is_cuda()) return false;
  }
  return true;
}

std::vector<torch::Tensor> fp8_linears(const torch::Tensor& x, const std::vector<torch::nn::Linear>& layers,
                                       Fp8SiteHistory* delayed, Fp8HistoryUse use) {
  std::vector<torch::Tensor> outputs;
  if (!fp8_linears_apply(x, layers)) {
    for (auto layer : layers) outputs.push_back(layer->forward(x));  // a holder copy: forward is not const
    return outputs;
  }
  std::vector<torch::Tensor> weights;
  for (const auto& layer : layers) weights.push_back(layer->weight);
  outputs = Fp8LinearsFunction::apply(x, at::TensorList(weights), reinterpret_cast<int64_t>(delayed),
                                      static_cast<int64_t>(use));
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i]->bias.defined()) outputs[i] = outputs[i] + layers[i]->bias.to(outputs[i].scalar_type());
  }
  return outputs;
}

}  // namespace models
}  // namespace enginery
