#include "engine_driver/batch_check.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "host_api/error.h"

namespace enginery {
namespace {

const char* kMaskValues = "0 or 1 per token";
const char* kTokenIdDtypes = "torch.int64, torch.int32";
// batch.h's loss inputs: per token, like input_ids.
const char* const kLossInputs[] = {"old_log_probs", "ref_log_probs", "advantages", "returns", "values"};

std::string field(const std::string& name) { return "batch['" + name + "']"; }

std::string shape_of(const torch::Tensor& t) {
  std::string out = "[";
  for (int64_t d = 0; d < t.dim(); ++d) out += (d > 0 ? ", " : "") + std::to_string(t.size(d));
  return out + "]";
}

std::string dtype_of(const torch::Tensor& t) { return "torch." + c10::getDtypeNames(t.scalar_type()).first; }

// The entry [row, t] as Python would print it.
std::string entry_text(const torch::Tensor& values, int64_t row, int64_t t) {
  const c10::Scalar v = values[row][t].item();
  if (v.isBoolean()) return v.toBool() ? "True" : "False";
  if (v.isIntegral(/*includeBool=*/false)) return std::to_string(v.toLong());
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v.toDouble());
  return text;
}

void check_placement(const std::string& name, const torch::Tensor& t, const torch::Device& device) {
  if (t.is_nested()) throw nested_tensor_refused(name);
  if (t.dim() == 0) {
    throw EngineryError("is a 0-dim tensor", field(name),
                        "a tensor with one row per sequence, or a Python number (metadata)");
  }
  if (t.device().type() != torch::kCPU && t.device().type() != device.type()) {
    throw EngineryError("is on the " + t.device().str() + " device", field(name),
                        device.is_cpu() ? "cpu" : "cpu, " + torch::Device(device.type()).str());
  }
}

// A per-token field: input_ids' [rows, tokens].
void check_per_token_shape(const Batch& batch, const std::string& name, const torch::Tensor& ids) {
  if (!batch.has(name)) return;
  const torch::Tensor& t = batch.at(name);
  if (t.sizes() != ids.sizes()) {
    throw EngineryError("has shape " + shape_of(t) + ", input_ids " + shape_of(ids), field(name),
                        "one entry per token: input_ids' shape " + shape_of(ids));
  }
}

// Entries to refuse, found on the tensor's own device; read back only as one verdict per row (see check_batch).
struct ValueCheck {
  std::string name;
  torch::Tensor bad;  // [rows, tokens] bool
  std::function<std::string(int64_t t, const std::string& value)> what;
  std::string allowed;
  torch::Tensor values;  // printed at the refused entry
};

ValueCheck mask_values(const std::string& name, const torch::Tensor& mask) {
  return {name, mask.ne(0).logical_and(mask.ne(1)),
          [](int64_t t, const std::string& v) { return "token " + std::to_string(t) + " is " + v; }, kMaskValues,
          mask};
}

// A target on padding has no log-prob (the model emits 0 there) yet the normaliser counts it: a mask that does not
// line up with the padding. Position 0 is never counted, so it is not checked.
ValueCheck targets_on_real_tokens(const torch::Tensor& loss_mask, const torch::Tensor& attention) {
  torch::Tensor bad = loss_mask.ne(0).logical_and(attention.eq(0));
  bad.narrow(1, 0, 1).fill_(false);
  return {"loss_mask", bad,
          [](int64_t t, const std::string&) {
            return "token " + std::to_string(t) + " is a target, but attention_mask marks it as padding";
          },
          "targets only at real tokens (attention_mask 1)", loss_mask};
}

ValueCheck token_ids(const torch::Tensor& ids, int64_t vocab_size) {
  torch::Tensor bad = ids.lt(0);
  if (vocab_size > 0) bad = bad.logical_or(ids.ge(vocab_size));
  const std::string outside =
      vocab_size > 0 ? ", outside the model's vocabulary of " + std::to_string(vocab_size) + " tokens" : "";
  return {"input_ids", bad,
          [outside](int64_t t, const std::string& v) { return "token " + std::to_string(t) + " is " + v + outside; },
          vocab_size > 0 ? "token ids 0.." + std::to_string(vocab_size - 1) : "token ids >= 0", ids};
}

ValueCheck finite_values(const std::string& name, const torch::Tensor& values) {
  return {name, values.isfinite().logical_not(),
          [](int64_t t, const std::string& v) { return "token " + std::to_string(t) + " is " + v; },
          "finite numbers at every token, masked ones included: a loss multiplies them by the mask, and "
          "NaN * 0 is NaN", values};
}

void check_padded(const Batch& batch, const torch::Device& device, const BatchLimits& limits, bool needs_targets) {
  const char* layout = "input_ids [rows >= 1, tokens >= 1] and attention_mask of its shape (host_api/batch.h)";
  if (batch.tensors().empty()) throw EngineryError("holds no tensor", "batch", layout);
  if (!batch.has("input_ids")) throw EngineryError("is missing", field("input_ids"), layout);
  const torch::Tensor& ids = batch.at("input_ids");
  check_placement("input_ids", ids, device);
  for (const auto& [name, t] : batch.tensors()) check_placement(name, t, device);
  if (ids.dim() != 2 || ids.size(0) == 0 || ids.size(1) == 0) {
    const std::string empty = ids.dim() == 2 ? (ids.size(0) == 0 ? "no rows: " : "no tokens: ") : "";
    throw EngineryError("has " + empty + "shape " + shape_of(ids), field("input_ids"), "[rows >= 1, tokens >= 1]");
  }
  if (ids.scalar_type() != torch::kLong && ids.scalar_type() != torch::kInt) {
    throw EngineryError("has dtype " + dtype_of(ids), field("input_ids"), kTokenIdDtypes);
  }
  if (!batch.has("attention_mask")) throw EngineryError("is missing", field("attention_mask"), layout);
  if (needs_targets && !batch.has("loss_mask")) {
    throw EngineryError("is missing, and a loss function counts its targets", field("loss_mask"),
                        "loss_mask of input_ids' shape, 1 at each target token");
  }
  for (const char* name : {"attention_mask", "position_ids", "loss_mask"}) check_per_token_shape(batch, name, ids);
  for (const char* name : kLossInputs) check_per_token_shape(batch, name, ids);
  if (batch.has("position_ids")) {
    const torch::Tensor& positions = batch.at("position_ids");
    if (positions.scalar_type() != torch::kLong && positions.scalar_type() != torch::kInt) {
      throw EngineryError("has dtype " + dtype_of(positions), field("position_ids"), kTokenIdDtypes);
    }
  }

  const torch::Tensor& attention = batch.at("attention_mask");
  std::vector<ValueCheck> checks;
  checks.push_back(token_ids(ids, limits.vocab_size));
  checks.push_back(mask_values("attention_mask", attention));
  // A row of padding only would be a sequence of no token once packed ([Note: packed batch]).
  torch::Tensor empty = torch::zeros_like(attention, attention.options().dtype(torch::kBool));
  empty.narrow(1, 0, 1).copy_(attention.eq(0).all(1, /*keepdim=*/true));
  checks.push_back({"attention_mask", empty,
                    [](int64_t, const std::string&) { return std::string("has no real token (every entry is 0)"); },
                    "one or more real tokens per row", attention});
  if (batch.has("loss_mask")) {
    const torch::Tensor& loss_mask = batch.at("loss_mask");
    checks.push_back(mask_values("loss_mask", loss_mask));
    checks.push_back(targets_on_real_tokens(loss_mask, attention.to(loss_mask.device())));
  }
  for (const char* name : kLossInputs) {
    if (batch.has(name) && batch.at(name).is_floating_point()) checks.push_back(finite_values(name, batch.at(name)));
  }

  // One read from the device: which rows each check refuses.
  std::vector<torch::Tensor> rows;
  rows.reserve(checks.size());
  for (const ValueCheck& c : checks) rows.push_back(c.bad.any(1).to(ids.device()));
  const torch::Tensor verdicts = torch::stack(rows).to(torch::kCPU);
  const auto refused = verdicts.accessor<bool, 2>();
  for (size_t k = 0; k < checks.size(); ++k) {
    for (int64_t row = 0; row < verdicts.size(1); ++row) {
      if (!refused[static_cast<int64_t>(k)][row]) continue;
      const ValueCheck& c = checks[k];
      const int64_t t = c.bad[row].nonzero()[0].item<int64_t>();
      throw EngineryError(c.what(t, entry_text(c.values, row, t)), field(c.name) + " row " + std::to_string(row),
                          c.allowed);
    }
  }
}

// The packed form ([Note: packed batch], host_api/batch.h). Entries are named by sequence and token.
void check_packed(const Batch& batch, const torch::Device& device, const BatchLimits& limits, bool needs_targets) {
  const char* layout = "cu_seqlens [sequences + 1] and input_ids [tokens] (host_api/batch.h, packed batch)";
  for (const auto& [name, t] : batch.tensors()) check_placement(name, t, device);
  if (!batch.has("input_ids")) throw EngineryError("is missing", field("input_ids"), layout);
  const torch::Tensor& cu = batch.at("cu_seqlens");
  const torch::Tensor& ids = batch.at("input_ids");
  if (cu.dim() != 1 || (cu.scalar_type() != torch::kLong && cu.scalar_type() != torch::kInt)) {
    throw EngineryError("has shape " + shape_of(cu) + " and dtype " + dtype_of(cu), field("cu_seqlens"),
                        "a 1-D torch.int64 or torch.int32 tensor: 0, then each sequence's end");
  }
  if (ids.dim() != 1) throw EngineryError("has shape " + shape_of(ids), field("input_ids"), "[tokens], 1-D");
  const auto ends_host = cu.to(torch::kCPU).to(torch::kLong).contiguous();
  const std::vector<int64_t> ends(ends_host.data_ptr<int64_t>(), ends_host.data_ptr<int64_t>() + ends_host.numel());
  if (ends.size() < 2 || ends.front() != 0 || ends.back() != ids.size(0)) {
    throw EngineryError("is " + shape_of(ends_host) + " ending at " + (ends.empty() ? "-" : std::to_string(ends.back())) +
                            " for " + std::to_string(ids.size(0)) + " tokens",
                        field("cu_seqlens"), "0, then each sequence's end, the last = input_ids' length (>= 1 sequence)");
  }
  for (size_t s = 1; s < ends.size(); ++s) {
    if (ends[s] <= ends[s - 1]) {
      throw EngineryError("sequence " + std::to_string(s - 1) + " has " + std::to_string(ends[s] - ends[s - 1]) +
                              " tokens", field("cu_seqlens"), "one or more tokens per sequence (increasing ends)");
    }
  }
  const int64_t tokens = ids.size(0), sequences = static_cast<int64_t>(ends.size()) - 1;
  if (ids.scalar_type() != torch::kLong && ids.scalar_type() != torch::kInt) {
    throw EngineryError("has dtype " + dtype_of(ids), field("input_ids"), kTokenIdDtypes);
  }
  if (batch.has("attention_mask") && batch.at("attention_mask").size(0) != static_cast<int64_t>(ends.size()) - 1) {
    throw EngineryError("is given per token with cu_seqlens", field("attention_mask"),
                        "none per token in a packed batch (cu_seqlens says where sequences end); a padded one per "
                        "sequence, as verl's batch keeps, is the loss's");
  }
  if (needs_targets && !batch.has("loss_mask")) {
    throw EngineryError("is missing, and a loss function counts its targets", field("loss_mask"),
                        "loss_mask per token (1 at each target token) or per sequence");
  }
  for (const auto& [name, t] : batch.tensors()) {
    if (name != "cu_seqlens" && (t.size(0) != tokens && t.size(0) != sequences)) {
      throw EngineryError("has shape " + shape_of(t) + " in a batch of " + std::to_string(sequences) +
                              " sequences and " + std::to_string(tokens) + " tokens",
                          field(name), "dim 0 of " + std::to_string(tokens) + " (per token) or " +
                                           std::to_string(sequences) + " (per sequence)");
    }
  }
  if (batch.has("position_ids")) {
    const torch::Tensor& positions = batch.at("position_ids");
    if (positions.sizes() != ids.sizes()) {
      throw EngineryError("has shape " + shape_of(positions) + ", input_ids " + shape_of(ids), field("position_ids"),
                          "one id per token: input_ids' shape");
    }
    if (positions.scalar_type() != torch::kLong && positions.scalar_type() != torch::kInt) {
      throw EngineryError("has dtype " + dtype_of(positions), field("position_ids"), kTokenIdDtypes);
    }
  }

  // Per-token checks on [tokens], per-sequence ones on [sequences, ...]: one read from the device for all; only a
  // refused batch reads more, to name the row (sequence) and its token as the padded form's errors do.
  std::vector<ValueCheck> checks;
  checks.push_back(token_ids(ids, limits.vocab_size));
  if (batch.has("loss_mask")) {
    const torch::Tensor& mask = batch.at("loss_mask");
    checks.push_back(mask_values("loss_mask", mask));
    if (mask.dim() == 1 && mask.size(0) == tokens) {
      // Nothing predicts a sequence's first token: a target there has no log-prob, yet would be counted.
      auto first = torch::zeros({tokens}, torch::kBool);
      for (size_t s = 0; s + 1 < ends.size(); ++s) first[ends[s]] = true;
      checks.push_back({"loss_mask", mask.ne(0).logical_and(first.to(mask.device())),
                        [](int64_t t, const std::string&) {
                          return "token " + std::to_string(t) + " is a target, but it is its sequence's first token "
                                 "(nothing predicts it)";
                        },
                        "0 at each sequence's first token", mask});
    }
  }
  for (const char* name : kLossInputs) {
    if (batch.has(name) && batch.at(name).is_floating_point()) checks.push_back(finite_values(name, batch.at(name)));
  }
  std::vector<torch::Tensor> any;
  for (const ValueCheck& c : checks) any.push_back(c.bad.any().to(ids.device()));
  const torch::Tensor verdicts = torch::stack(any).to(torch::kCPU);
  for (size_t k = 0; k < checks.size(); ++k) {
    if (!verdicts[static_cast<int64_t>(k)].item<bool>()) continue;
    const ValueCheck& c = checks[k];
    const torch::Tensor bad = c.bad.reshape({c.bad.size(0), -1});
    const torch::Tensor values = c.values.reshape({c.values.size(0), -1});
    const int64_t first = bad.any(1).nonzero()[0].item<int64_t>();
    if (c.bad.size(0) == tokens && c.bad.dim() == 1) {  // per token: its sequence and its place there
      const int64_t s = static_cast<int64_t>(std::upper_bound(ends.begin(), ends.end(), first) - ends.begin()) - 1;
      throw EngineryError(c.what(first - ends[s], entry_text(values, first, 0)), field(c.name) + " row " +
                          std::to_string(s), c.allowed);
    }
    const int64_t t = bad[first].nonzero()[0].item<int64_t>();
    throw EngineryError(c.what(t, entry_text(values, first, t)), field(c.name) + " row " + std::to_string(first),
                        c.allowed);
  }
}

}  // namespace

void check_batch(const Batch& batch, const torch::Device& device, const BatchLimits& limits, bool needs_targets) {
  if (batch.tensors().empty()) throw EngineryError("holds no tensor", "batch", "host_api/batch.h's layout");
  if (batch.packed()) {
    check_packed(batch, device, limits, needs_targets);
  } else {
    check_padded(batch, device, limits, needs_targets);
  }
}

EngineryError nested_tensor_refused(const std::string& name) {
  return EngineryError("is a nested (jagged) tensor", field(name),
                       "a padded [rows, tokens] tensor (verl's jagged batches go through enginery.verl)");
}

}  // namespace enginery
