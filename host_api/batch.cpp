#include "host_api/batch.h"

#include <cmath>
#include <numeric>
#include <string>

#include "host_api/error.h"

namespace enginery {
namespace {

// A packed batch's sequence ends on the host, as int64: cu_seqlens is read where the batch is cut.
std::vector<int64_t> ends_of(const torch::Tensor& cu_seqlens) {
  const auto host = cu_seqlens.to(torch::kCPU).to(torch::kLong).contiguous();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

// Whether a tensor of a packed batch is per token ([Note: packed batch]: dim 0 is N) or per sequence (dim 0 is S);
// throws naming it when it is neither.
bool per_token(const std::string& name, const torch::Tensor& t, int64_t tokens, int64_t sequences) {
  if (t.dim() > 0 && t.size(0) == tokens) return true;
  if (t.dim() > 0 && t.size(0) == sequences) return false;
  throw EngineryError("has " + (t.dim() > 0 ? std::to_string(t.size(0)) + " rows" : std::string("no dimension")) +
                          " in a packed batch of " + std::to_string(sequences) + " sequences and " +
                          std::to_string(tokens) + " tokens",
                      "batch['" + name + "']", "dim 0 of one entry per token or one per sequence");
}

}  // namespace

void Batch::set(const std::string& name, torch::Tensor tensor) { tensors_[name] = std::move(tensor); }

bool Batch::has(const std::string& name) const { return tensors_.count(name) != 0; }

const torch::Tensor& Batch::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string present;
    for (const auto& [key, _] : tensors_) present += (present.empty() ? "" : ", ") + key;
    throw EngineryError("batch has no tensor '" + name + "'", "Batch", present.empty() ? "<empty batch>" : present);
  }
  return it->second;
}

double batch_temperature(const Batch& batch) {
  if (!batch.has_meta("temperature")) return 1.0;
  const MetaValue& value = batch.meta("temperature");
  double t = 0.0;
  if (const double* d = std::get_if<double>(&value)) {
    t = *d;
  } else if (const int64_t* i = std::get_if<int64_t>(&value)) {
    t = static_cast<double>(*i);
  } else {
    throw EngineryError("must be a number", "batch metadata 'temperature'", "a finite number > 0");
  }
  if (!(t > 0.0) || !std::isfinite(t)) {
    throw EngineryError("= " + std::to_string(t), "batch metadata 'temperature'", "a finite number > 0");
  }
  return t;
}

const MetaValue& Batch::meta(const std::string& name) const {
  auto it = meta_.find(name);
  if (it == meta_.end()) throw EngineryError("batch has no metadata '" + name + "'", "Batch");
  return it->second;
}

int64_t Batch::size() const {
  if (packed()) return at("cu_seqlens").numel() - 1;
  for (const auto& [_, tensor] : tensors_) {
    if (tensor.dim() > 0) return tensor.size(0);
  }
  return 0;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch out;
  out.meta_ = meta_;
  if (!packed()) {
    for (const auto& [name, tensor] : tensors_) out.tensors_[name] = tensor.slice(0, begin, end);
    return out;
  }
  const std::vector<int64_t> ends = ends_of(at("cu_seqlens"));
  const int64_t sequences = static_cast<int64_t>(ends.size()) - 1;
  for (const auto& [name, tensor] : tensors_) {
    if (name == "cu_seqlens") {
      out.tensors_[name] = tensor.slice(0, begin, end + 1) - ends[begin];
    } else if (per_token(name, tensor, ends.back(), sequences)) {
      out.tensors_[name] = tensor.slice(0, ends[begin], ends[end]);
    } else {
      out.tensors_[name] = tensor.slice(0, begin, end);
    }
  }
  return out;
}

Batch Batch::select(const std::vector<int64_t>& rows) const {
  bool consecutive = !rows.empty();
  for (size_t i = 1; i < rows.size() && consecutive; ++i) consecutive = rows[i] == rows[i - 1] + 1;
  if (consecutive) return slice(rows.front(), rows.back() + 1);
  Batch out;
  out.meta_ = meta_;
  const auto index = torch::tensor(rows, torch::kLong);
  if (!packed()) {
    for (const auto& [name, t] : tensors_) out.tensors_[name] = t.index_select(0, index.to(t.device()));
    return out;
  }
  const std::vector<int64_t> ends = ends_of(at("cu_seqlens"));
  std::vector<int64_t> tokens, new_ends{0};
  for (int64_t r : rows) {
    for (int64_t t = ends[r]; t < ends[r + 1]; ++t) tokens.push_back(t);
    new_ends.push_back(static_cast<int64_t>(tokens.size()));
  }
  const auto token_index = torch::tensor(tokens, torch::kLong);
  const int64_t sequences = static_cast<int64_t>(ends.size()) - 1;
  for (const auto& [name, t] : tensors_) {
    if (name == "cu_seqlens") {
      out.tensors_[name] = torch::tensor(new_ends, torch::kLong).to(t.device());
    } else {
      const auto& pick = per_token(name, t, ends.back(), sequences) ? token_index : index;
      out.tensors_[name] = t.index_select(0, pick.to(t.device()));
    }
  }
  return out;
}

std::vector<Batch> Batch::split(int64_t rows_per_part) const {
  if (rows_per_part <= 0) throw EngineryError("rows_per_part must be positive", "Batch::split", ">= 1");
  std::vector<Batch> parts;
  for (int64_t begin = 0; begin < size(); begin += rows_per_part) {
    parts.push_back(slice(begin, std::min(size(), begin + rows_per_part)));
  }
  return parts;
}

Batch Batch::to(const torch::Device& device) const {
  Batch out;
  // cu_seqlens stays where it is: engines read it on the host (models/packed_sequences.h), and a copy to the GPU
  // and back would synchronise.
  for (const auto& [name, tensor] : tensors_) out.tensors_[name] = name == "cu_seqlens" ? tensor : tensor.to(device);
  out.meta_ = meta_;
  return out;
}

}  // namespace enginery
