// The experts' GEMMs run over the token copies sorted by expert, never in a loop over experts: at::_grouped_mm
// takes the groups' end offsets on the device (one kernel per GEMM, no padding and no host synchronisation), and
// where it does not apply (fp64, rows not a multiple of 16 bytes, fp32 on CUDA) every group is zero-padded to the
// largest and one torch::bmm runs over [E, C, K] (one host synchronisation for C, work and memory up to E times the
// routed rows when the routing is very uneven). docs/ARCHITECTURE.md, "Mixture of experts".
#include "models/moe.h"

#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "host_api/error.h"
#include "models/fused_ops.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype the GEMMs run in: autocast's when it is on (as a linear would), else x's.
c10::ScalarType compute_dtype(const torch::Tensor& x) {
  const auto device = x.device().type();
  return compat::autocast_enabled(device) ? compat::autocast_dtype(device) : x.scalar_type();
}

// [E, N, K]: expert e's weight, the concatenation of its per_expert tensors along the output dimension.
torch::Tensor stack_experts(at::TensorList weights, int64_t experts, int64_t per_expert, c10::ScalarType dtype) {
  const int64_t rows = weights[0].size(0), k = weights[0].size(1);
  return torch::stack(weights).view({experts, per_expert * rows, k}).to(dtype);
}

ExpertGemm resolve(ExpertGemm gemm, const torch::Tensor& x, int64_t k, int64_t n) {
  if (gemm != ExpertGemm::kAuto) return gemm;
  return grouped_gemm_applies(x.device(), x.scalar_type(), k, n) ? ExpertGemm::kGrouped : ExpertGemm::kPadded;
}

// The padded layout of rows sorted by expert: row r goes to slot (e, r - start_e) of [E, C, .].
struct PaddedGroups {
  int64_t experts = 0, capacity = 0;
  torch::Tensor slot;  // [M] int64: e * C + (r - start_e)

  PaddedGroups(const torch::Tensor& counts, int64_t rows) : experts(counts.size(0)) {
    capacity = rows == 0 ? 0 : counts.max().item<int64_t>();
    const auto opts = counts.options();
    auto row_expert = torch::repeat_interleave(torch::arange(experts, opts), counts, /*dim=*/0, rows);
    auto starts = counts.cumsum(0) - counts;
    slot = row_expert * capacity + (torch::arange(rows, opts) - starts.index_select(0, row_expert));
  }
  torch::Tensor pad(const torch::Tensor& rows) const {  // [M, K] -> [E, C, K]
    const int64_t k = rows.size(1);
    return torch::zeros({experts * capacity, k}, rows.options()).index_copy(0, slot, rows).view({experts, capacity, k});
  }
  torch::Tensor unpad(const torch::Tensor& groups) const {  // [E, C, N] -> [M, N]
    return groups.reshape({experts * capacity, groups.size(2)}).index_select(0, slot);
  }
};

torch::Tensor group_offsets(const torch::Tensor& counts) { return counts.cumsum(0).to(torch::kInt); }

// y [M, N] = x[rows of e] @ w[e]^T for w [E, N, K].
torch::Tensor forward_gemm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& counts,
                           ExpertGemm gemm) {
  if (gemm == ExpertGemm::kGrouped) return at::_grouped_mm(x, w.transpose(1, 2), group_offsets(counts));
  PaddedGroups groups(counts, x.size(0));
  return groups.unpad(torch::bmm(groups.pad(x), w.transpose(1, 2)));
}

class ExpertLinearFunction : public torch::autograd::Function<ExpertLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor counts, at::TensorList weights,
                               int64_t per_expert, int64_t gemm) {
    const auto dtype = compute_dtype(x);
    const int64_t experts = counts.size(0);
    auto w = stack_experts(weights, experts, per_expert, dtype);
    const auto chosen = resolve(static_cast<ExpertGemm>(gemm), x.to(dtype), w.size(2), w.size(1));
    std::vector<torch::Tensor> saved{x, counts};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["per_expert"] = per_expert;
    ctx->saved_data["gemm"] = static_cast<int64_t>(chosen);
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    return forward_gemm(x.to(dtype).contiguous(), w, counts, chosen);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x_in = saved[0];
    const auto& counts = saved[1];
    const std::vector<torch::Tensor> weights(saved.begin() + 2, saved.end());
    const int64_t per_expert = ctx->saved_data["per_expert"].toInt();
    const auto gemm = static_cast<ExpertGemm>(ctx->saved_data["gemm"].toInt());
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t experts = counts.size(0);
    const auto w = stack_experts(weights, experts, per_expert, dtype);  // [E, N, K]
    const auto x = x_in.to(dtype).contiguous();
    const auto gy = grads[0].to(dtype).contiguous();  // [M, N]
    torch::Tensor gx, gw;
    if (gemm == ExpertGemm::kGrouped) {
      const auto offsets = group_offsets(counts);
      gx = at::_grouped_mm(gy, w, offsets);      // [M, K]: gy[rows of e] @ w[e]
      gw = at::_grouped_mm(gy.t(), x, offsets);  // [E, N, K]: gy[rows of e]^T @ x[rows of e]
    } else {
      PaddedGroups groups(counts, x.size(0));
      const auto gy_groups = groups.pad(gy);
      gx = groups.unpad(torch::bmm(gy_groups, w));
      gw = torch::bmm(gy_groups.transpose(1, 2), groups.pad(x));
    }
    variable_list result(2 + weights.size() + 2);  // x, counts, the weights, per_expert, gemm
    result[0] = gx.to(x_in.scalar_type());
    const auto per_weight = gw.reshape({experts * per_expert, weights[0].size(0), weights[0].size(1)}).unbind(0);
    for (size_t i = 0; i < weights.size(); ++i) result[2 + i] = per_weight[i].to(weights[i].scalar_type());
    return result;
  }
};

}  // namespace

bool grouped_gemm_applies(const torch::Device& device, c10::ScalarType dtype, int64_t k, int64_t n) {
  const bool dtype_ok = dtype == c10::kBFloat16 || (device.is_cpu() && dtype == c10::kFloat);
  const int64_t bytes = static_cast<int64_t>(c10::elementSize(dtype));
  return dtype_ok && (k * bytes) % 16 == 0 && (n * bytes) % 16 == 0;
}

torch::Tensor expert_linear(const torch::Tensor& x, const torch::Tensor& counts,
                            const std::vector<torch::Tensor>& weights, int64_t per_expert, ExpertGemm gemm) {
  const int64_t experts = counts.size(0);
  if (experts == 0 || static_cast<int64_t>(weights.size()) != experts * per_expert) {
    throw EngineryError("expert_linear needs per_expert weights for each of the " + std::to_string(experts) +
                            " experts, got " + std::to_string(weights.size()),
                        "models::expert_linear");
  }
  return ExpertLinearFunction::apply(x, counts, at::TensorList(weights), per_expert, static_cast<int64_t>(gemm));
}

Routing route_tokens(const torch::Tensor& x, const torch::Tensor& gate_weight, int64_t top_k, bool normalize) {
  auto logits = torch::nn::functional::linear(x, gate_weight);
  // transformers' router: softmax in fp32 whatever the model's dtype (fp64 included), top-k of the probabilities,
  // renormalised in fp32, then cast to the logits' dtype.
  auto probs = torch::softmax(logits, -1, torch::kFloat);
  auto [top, experts] = probs.topk(top_k, -1);
  if (normalize) top = top / top.sum(-1, /*keepdim=*/true);
  return {logits, experts, top.to(logits.scalar_type())};
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const ModelArgs& a)
    : top_k_(a.moe.num_experts_per_tok), normalize_(a.moe.norm_topk_prob) {
  using torch::nn::LinearOptions;
  gate = register_module("gate", torch::nn::Linear(LinearOptions(a.hidden_size, a.moe.num_experts).bias(false)));
  // Each expert is the dense MLP at moe_intermediate_size: its parameters, not its forward, are used.
  ModelArgs expert_args = a;
  expert_args.intermediate_size = a.moe.moe_intermediate_size;
  expert_args.mlp_bias = false;
  torch::nn::ModuleList list;
  for (int64_t e = 0; e < a.moe.num_experts; ++e) {
    experts.emplace_back(expert_args);
    list->push_back(experts.back());
  }
  register_module("experts", list);
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x, ExpertGemm gemm) {
  const int64_t hidden = x.size(-1), num_experts = static_cast<int64_t>(experts.size());
  const auto rows = x.reshape({-1, hidden});
  const Routing routing = route_tokens(rows, gate->weight, top_k_, normalize_);
  // Each token's k copies, sorted by expert (stable: a token's copies keep their top-k order within an expert).
  const auto flat_experts = routing.experts.reshape({-1});
  const auto order = torch::argsort(flat_experts, /*stable=*/true, /*dim=*/0);
  const auto token = order.div(top_k_, "floor");
  // Rows per expert without bincount, which synchronises with the host on CUDA to size its output.
  const auto counts =
      torch::zeros({num_experts}, flat_experts.options()).scatter_add_(0, flat_experts, torch::ones_like(flat_experts));
  std::vector<torch::Tensor> gate_up, down;
  for (auto& expert : experts) {
    gate_up.push_back(expert->gate_proj->weight);
    gate_up.push_back(expert->up_proj->weight);
    down.push_back(expert->down_proj->weight);
  }
  const auto h = expert_linear(rows.index_select(0, token), counts, gate_up, /*per_expert=*/2, gemm);
  const int64_t inter = h.size(1) / 2;
  auto out = expert_linear(swiglu(h.narrow(1, 0, inter), h.narrow(1, inter, inter)), counts, down, 1, gemm);
  out = out * routing.weights.reshape({-1}).index_select(0, order).unsqueeze(1).to(out.scalar_type());
  return torch::zeros({rows.size(0), hidden}, out.options()).index_add(0, token, out).view(x.sizes());
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& attention_mask) {
  const auto logits = torch::cat(router_logits, 0);
  const auto probs = torch::softmax(logits, -1);
  const auto chosen = torch::one_hot(std::get<1>(probs.topk(top_k, -1)), num_experts).to(torch::kFloat);  // [R, k, E]
  torch::Tensor tokens_per_expert, prob_per_expert;
  if (!attention_mask.defined()) {
    tokens_per_expert = chosen.mean(0);
    prob_per_expert = probs.mean(0);
  } else {
    const int64_t layers = logits.size(0) / attention_mask.numel();
    const auto mask = attention_mask.reshape({1, -1}).expand({layers, -1}).reshape({-1}).to(logits.device());
    const auto weight = mask.to(torch::kFloat);
    tokens_per_expert = (chosen * weight.view({-1, 1, 1})).sum(0) / weight.sum();
    prob_per_expert = (probs * mask.to(probs.scalar_type()).view({-1, 1})).sum(0) / weight.sum();
  }
  return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * static_cast<double>(num_experts);
}

}  // namespace models
}  // namespace enginery
