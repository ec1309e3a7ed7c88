#include "models/fused_ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include "support/torch_compat.h"
#include "kernels/fused_cuda.h"

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    if (kernels::applies(gate, kernels::Kernel::kSwiglu)) return kernels::swiglu(gate, up);
    return torch::silu(gate).mul_(up);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto& g = grads[0];
    if (kernels::applies(gate, kernels::Kernel::kSwiglu)) {
      auto d = kernels::swiglu_backward(g, gate, up);
      return {d.first, d.second};
    }
    // Same products autograd forms for silu(gate) * up: d/dup = g * silu(gate), d/dgate = silu'(gate) * (g * up).
    auto grad_up = torch::silu(gate).mul_(g);
    auto grad_gate = at::silu_backward(g * up, gate);
    return {grad_gate, grad_up};
  }
};

class SwigluDownFunction : public torch::autograd::Function<SwigluDownFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up,
                               const torch::Tensor& weight) {
    ctx->save_for_backward({gate, up, weight});
    return at::linear(kernels::swiglu(gate, up), weight.to(gate.scalar_type()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto& weight = saved[2];
    compat::AutocastScope no_autocast(gate.device().type(), c10::kFloat);
    torch::NoGradGuard no_grad;
    const auto dtype = gate.scalar_type();
    const int64_t inner = gate.size(-1);
    auto w = weight.to(dtype);
    auto g = grads[0].to(dtype).reshape({-1, w.size(0)});
    auto product = kernels::swiglu(gate, up).view({-1, inner});
    auto grad_weight = torch::mm(g.t(), product);
    product.reset();
    auto grad_product = torch::mm(g, w).view(gate.sizes());
    auto d = kernels::swiglu_backward(grad_product, gate, up);
    return {d.first, d.second, grad_weight.to(weight.scalar_type())};
  }
};

class UnusedOutputLinearFunction : public torch::autograd::Function<UnusedOutputLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    auto shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return torch::zeros(shape, x.options());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    compat::AutocastScope no_autocast(x.device().type(), c10::kFloat);
    torch::NoGradGuard no_grad;
    auto g = grads[0].to(x.scalar_type()).reshape({-1, weight.size(0)});
    auto grad_x = torch::mm(g, weight).view(x.sizes());
    auto grad_weight = torch::mm(g.t(), x.reshape({-1, x.size(-1)}));
    return {grad_x, grad_weight};
  }
};

// Only the rotated tensor's gradient flows back: the tables are position functions, never trained.
class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return kernels::rope(x, cos, sin, /*transpose=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {kernels::rope(grads[0], saved[0], saved[1], /*transpose=*/true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fused_swiglu_down_applies(const torch::Tensor& gate, const torch::Tensor& up) {
  return kernels::applies(gate, kernels::Kernel::kSwiglu) && gate.scalar_type() == up.scalar_type() && gate.sizes() == up.sizes();
}

torch::Tensor swiglu_down(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& down_weight) {
  return SwigluDownFunction::apply(gate, up, down_weight);
}

torch::Tensor linear_output_unused(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const auto dtype = x.scalar_type();
  auto out = UnusedOutputLinearFunction::apply(x, weight.to(dtype));
  // A bias (none in the shipped models' MLPs) adds its gradient, the sum of g over rows, through autograd's add.
  return bias.defined() ? out + bias.to(dtype) : out;
}

bool fused_rope_applies(const torch::Tensor& x) { return kernels::applies(x, kernels::Kernel::kRope) && x.dim() == 4; }

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return RopeFunction::apply(x, cos, sin);
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (gate.scalar_type() != up.scalar_type()) return torch::silu(gate) * up;  // promotion: leave it to autograd
  return SwigluFunction::apply(gate, up);
}

bool fused_rms_norm_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.is_cuda() && weight.defined() && x.scalar_type() == weight.scalar_type();
}

}  // namespace models
}  // namespace enginery
