#include "engine_driver/padded_edge.h"

#include <utility>

namespace enginery {

PaddedEdge::PaddedEdge(const Batch& padded) : padded_(padded) {
  const torch::Tensor valid = padded.at("attention_mask").to(torch::kBool);
  const torch::Tensor index = valid.reshape({-1}).nonzero().squeeze(1);  // flat positions of the real tokens
  const torch::Tensor lengths = valid.sum(1).to(torch::kCPU).to(torch::kLong);
  const torch::Tensor ends = torch::cat({torch::zeros({1}, torch::kLong), lengths.cumsum(0)});
  packed_.set("cu_seqlens", ends);
  packed_.set("input_ids", padded.at("input_ids").reshape({-1}).index_select(0, index.to(padded.at("input_ids").device())));
  if (padded.has("position_ids")) {
    const torch::Tensor& p = padded.at("position_ids");
    packed_.set("position_ids", p.reshape({-1}).index_select(0, index.to(p.device())));
  }
  if (padded.has("loss_mask")) {
    const torch::Tensor& m = padded.at("loss_mask");
    torch::Tensor mask = m.reshape({-1}).index_select(0, index.to(m.device())).clone();
    // A row's first real token has no log-prob (nothing before it); with left padding it is not at position 0.
    mask.index_fill_(0, ends.narrow(0, 0, ends.size(0) - 1).to(mask.device()), 0);
    packed_.set("loss_mask", mask);
  }
  // The rest (attention_mask, the loss inputs) rides along per sequence, padded, as verl's batch keeps its own.
  for (const auto& [name, t] : padded.tensors()) {
    if (!packed_.has(name)) packed_.set(name, t);
  }
  for (const auto& [name, value] : padded.all_meta()) packed_.set_meta(name, value);
}

torch::Tensor to_padded(const std::string& name, const torch::Tensor& packed, const torch::Tensor& valid) {
  const torch::Tensor flat_valid = valid.to(packed.device()).to(torch::kBool).reshape({-1});
  const torch::Tensor index = flat_valid.nonzero().squeeze(1);
  const torch::Tensor zeros = torch::zeros({flat_valid.size(0)}, packed.options());
  if (name == "values") return zeros.index_copy(0, index, packed).view(valid.sizes());
  // Packed token j with a next token in its row predicted that token: its value goes to the next token's place.
  const torch::Tensor lengths = valid.to(torch::kLong).sum(1).to(packed.device());
  const torch::Tensor last = lengths.cumsum(0) - 1;
  torch::Tensor has_next = torch::ones({index.size(0)}, flat_valid.options());
  has_next.index_fill_(0, last, false);
  const torch::Tensor from = has_next.nonzero().squeeze(1);
  return zeros.index_copy(0, index.index_select(0, from + 1), packed.index_select(0, from)).view(valid.sizes());
}

LossFn PaddedEdge::padded_loss(LossFn loss) const {
  return [loss = std::move(loss), padded = padded_](const ModelOutput& output, const Batch&, const LossContext& ctx) {
    const Batch rows = padded.select(ctx.rows);
    const torch::Tensor& valid = rows.at("attention_mask");
    ModelOutput out;
    if (output.log_probs.defined()) out.log_probs = to_padded("log_probs", output.log_probs, valid);
    if (output.entropy.defined()) out.entropy = to_padded("entropy", output.entropy, valid);
    if (output.values.defined()) out.values = to_padded("values", output.values, valid);
    const torch::Device device = (out.log_probs.defined() ? out.log_probs : out.values).device();
    return loss(out, rows.to(device), ctx);
  };
}

std::map<std::string, torch::Tensor> PaddedEdge::padded_outputs(
    const std::map<std::string, torch::Tensor>& packed) const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : packed) out[name] = to_padded(name, t, padded_.at("attention_mask"));
  return out;
}

}  // namespace enginery
