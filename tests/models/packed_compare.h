#pragma once
// Packed (model.use_remove_padding) against padded on the same batch: outputs, a loss over them and every
// gradient. Shared by the CPU tests (fp32) and the GPU tests (bf16 autocast, aten's varlen flash kernel).
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>

#include "models/causal_lm.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {
namespace testing {

// ||a - b|| / ||b||, 0 when both are zero.
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double ref = b.to(torch::kDouble).norm().item<double>();
  const double diff = (a.to(torch::kDouble) - b.to(torch::kDouble)).norm().item<double>();
  return ref == 0.0 ? diff : diff / ref;
}

struct PackedRun {
  ModelOutput output;
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;
};

// One forward and backward. The loss weighs every token differently, so a token routed to the wrong place shows.
inline PackedRun run_for_packing(CausalLM& model, ModelInputs in, bool remove_padding, c10::ScalarType autocast) {
  model.zero_grad();
  in.remove_padding = remove_padding;
  HeadOptions head;
  head.compute_entropy = model.head_kind() == HeadKind::kLanguageModel;
  PackedRun run;
  {
    compat::AutocastScope scope(in.input_ids.device().type(), autocast);
    run.output = model.forward(in, head, nullptr);
  }
  const auto& ids = in.input_ids;
  auto weights = torch::arange(ids.numel(), torch::TensorOptions().dtype(torch::kFloat).device(ids.device()))
                     .remainder(7).add(1).view(ids.sizes()) / 7.0;
  run.loss = run.output.values.defined()
                 ? (run.output.values * weights).sum()
                 : (run.output.log_probs * weights).sum() + 0.3 * (run.output.entropy * weights).sum();
  run.loss.backward();
  for (auto& p : model.named_parameters()) {
    if (p.value().grad().defined()) run.grads[p.key()] = p.value().grad().clone();
  }
  return run;
}

struct PackedComparison {
  double outputs = 0, loss = 0, grads = 0;  // largest relative error of each kind
  std::string worst_grad;
  size_t grads_compared = 0;
};

inline PackedComparison compare_packed_with_padded(CausalLM& model, const ModelInputs& in,
                                                   c10::ScalarType autocast = c10::kFloat) {
  const PackedRun padded = run_for_packing(model, in, false, autocast);
  const PackedRun packed = run_for_packing(model, in, true, autocast);
  PackedComparison c;
  for (const auto& [a, b] : {std::pair{packed.output.log_probs, padded.output.log_probs},
                             std::pair{packed.output.entropy, padded.output.entropy},
                             std::pair{packed.output.values, padded.output.values}}) {
    if (!b.defined()) continue;
    if (!a.defined() || a.sizes() != b.sizes()) return {1e9, 1e9, 1e9, "output shape", 0};
    c.outputs = std::max(c.outputs, relative_error(a, b));
  }
  c.loss = relative_error(packed.loss, padded.loss);
  for (const auto& [name, g] : padded.grads) {
    auto it = packed.grads.find(name);
    const double e = it == packed.grads.end() ? 1e9 : relative_error(it->second, g);
    if (e >= c.grads) {
      c.grads = e;
      c.worst_grad = name;
    }
    ++c.grads_compared;
  }
  return c;
}

}  // namespace testing
}  // namespace models
}  // namespace enginery
