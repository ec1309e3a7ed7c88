#include "models/fused_ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include "host_api/torch_compat.h"

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return torch::silu(gate).mul_(up);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto& g = grads[0];
    // Same products autograd forms for silu(gate) * up: d/dup = g * silu(gate), d/dgate = silu'(gate) * (g * up).
    auto grad_up = torch::silu(gate).mul_(g);
    auto grad_gate = at::silu_backward(g * up, gate);
    return {grad_gate, grad_up};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (gate.scalar_type() != up.scalar_type()) return torch::silu(gate) * up;  // promotion: leave it to autograd
  return SwigluFunction::apply(gate, up);
}

bool fused_rms_norm_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  return compat::kHasFusedRmsNorm && x.is_cuda() && weight.defined() && x.scalar_type() == weight.scalar_type();
}

}  // namespace models
}  // namespace enginery
