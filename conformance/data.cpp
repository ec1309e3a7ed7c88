#include "conformance/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "host_api/error.h"

namespace enginery {
namespace conformance {

Batch make_batch(const Target& target, int64_t rows, int64_t seq, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto ids = at::randint(1, kTokenLimit, {rows, seq}, generator, torch::dtype(torch::kInt64));
  auto positions = torch::arange(seq, torch::dtype(torch::kInt64)).unsqueeze(0).expand({rows, seq});
  // Lengths seq, seq-4, seq-7, seq-2, ...: padding in most rows, never shorter than the prompt plus two targets.
  const int64_t cut[] = {0, 4, 7, 2};
  std::vector<int64_t> lengths;
  for (int64_t r = 0; r < rows; ++r) lengths.push_back(std::max<int64_t>(5, seq - cut[r % 4]));
  auto length = torch::tensor(lengths, torch::dtype(torch::kInt64)).unsqueeze(1);
  auto attention_mask = (positions < length).to(torch::kInt64);
  auto loss_mask = ((positions >= 3) & (positions < length)).to(torch::kFloat);
  ids = ids * attention_mask;  // pad id 0

  Batch batch;
  batch.set("input_ids", ids);
  batch.set("attention_mask", attention_mask);
  batch.set("loss_mask", loss_mask);
  if (target.value_model()) {
    auto returns = at::rand({rows, seq}, generator, torch::dtype(torch::kFloat)) * 2.0 - 1.0;
    batch.set("returns", returns * loss_mask);
  }
  return batch.to(torch::Device(target.key.device));
}

Batch packed_batch(const Batch& padded) {
  const Batch cpu = padded.to(torch::kCPU);
  std::vector<int64_t> ends{0};
  std::map<std::string, std::vector<torch::Tensor>> rows;
  for (int64_t r = 0; r < cpu.size(); ++r) {
    const int64_t n = cpu.at("attention_mask")[r].sum().item<int64_t>();
    for (const auto& [name, t] : cpu.tensors()) {
      if (name != "attention_mask") rows[name].push_back(t[r].narrow(0, 0, n));
    }
    ends.push_back(ends.back() + n);
  }
  Batch packed;
  packed.set("cu_seqlens", torch::tensor(ends, torch::kLong));
  for (auto& [name, list] : rows) packed.set(name, torch::cat(list).to(padded.at("input_ids").device()));
  return packed;
}

const char* head_name(const Target& target) { return target.value_model() ? "values" : "log_probs"; }

const torch::Tensor& head_of(const Target& target, const ModelOutput& output) {
  return target.value_model() ? output.values : output.log_probs;
}

torch::Tensor head_of(const Target& target, const BatchOutput& output) {
  auto it = output.outputs.find(head_name(target));
  if (it == output.outputs.end() || !it->second.defined()) {
    throw EngineryError(std::string("BatchOutput.outputs has no '") + head_name(target) + "'", "conformance");
  }
  return it->second;
}

torch::Tensor token_loss_sum(const Target& target, const torch::Tensor& head, const Batch& batch) {
  if (!head.defined()) {
    throw EngineryError(std::string("the model output has no ") + head_name(target), "conformance loss");
  }
  auto mask = batch.at("loss_mask").to(head.dtype());
  if (batch.packed() && !target.value_model()) mask = torch::roll(mask, -1, 0);  // never a sequence's first token
  if (target.value_model()) {
    auto diff = head - batch.at("returns").to(head.dtype());
    return 0.5 * (diff * diff * mask).sum();
  }
  return -(head * mask).sum();
}

LossFn token_mean_loss(const Target& target) {
  return [target](const ModelOutput& output, const Batch& micro_batch, const LossContext& ctx) {
    LossResult result;
    result.loss = token_loss_sum(target, head_of(target, output), micro_batch) / ctx.global_num_tokens;
    return result;
  };
}

LossFn fixed_normaliser_loss(const Target& target, double normaliser) {
  return [target, normaliser](const ModelOutput& output, const Batch& micro_batch, const LossContext&) {
    LossResult result;
    result.loss = token_loss_sum(target, head_of(target, output), micro_batch) / normaliser;
    return result;
  };
}

LossFn scaled_loss(LossFn inner, double factor) {
  return [inner, factor](const ModelOutput& output, const Batch& micro_batch, const LossContext& ctx) {
    LossResult result = inner(output, micro_batch, ctx);
    result.loss = result.loss * factor;
    return result;
  };
}

double target_tokens(const Batch& batch) { return batch.at("loss_mask").to(torch::kDouble).sum().item<double>(); }

double reference_mean_loss(const Target& target, const torch::Tensor& head, const Batch& batch) {
  Batch cpu = batch.to(torch::kCPU);
  return token_loss_sum(target, head.to(torch::kCPU).to(torch::kDouble), cpu).item<double>() / target_tokens(cpu);
}

ParamList read_params(BaseEngine& engine) {
  ParamList params;
  engine.get_per_tensor_param([&](const std::string& name, const torch::Tensor& full) {
    params.emplace_back(name, full.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
  });
  return params;
}

std::string diff_params(const ParamList& a, const ParamList& b, double atol, double rtol) {
  std::ostringstream out;
  if (a.size() != b.size()) {
    out << a.size() << " parameters against " << b.size();
    return out.str();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& [name, x] = a[i];
    const auto& [other, y] = b[i];
    if (name != other) return "parameter " + std::to_string(i) + " is '" + name + "' against '" + other + "'";
    if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type()) {
      out << name << ": " << x.sizes() << " " << x.scalar_type() << " against " << y.sizes() << " "
          << y.scalar_type();
      return out.str();
    }
    const bool same = (atol == 0.0 && rtol == 0.0) ? torch::equal(x, y) : torch::allclose(x, y, rtol, atol);
    if (!same) {
      out << name << " differs: max |a - b| = " << max_abs_diff(x, y) << " (atol " << atol << ", rtol " << rtol
          << ")";
      return out.str();
    }
  }
  return "";
}

bool all_finite(const ParamList& params) {
  for (const auto& [_, tensor] : params) {
    if (!torch::isfinite(tensor).all().item<bool>()) return false;
  }
  return true;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto diff = (a.to(torch::kCPU).to(torch::kDouble) - b.to(torch::kCPU).to(torch::kDouble)).abs();
  if (mask.defined()) diff = diff * mask.to(torch::kCPU).to(torch::kDouble);
  return diff.numel() == 0 ? 0.0 : diff.max().item<double>();
}

}  // namespace conformance
}  // namespace enginery
