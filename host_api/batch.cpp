#include "host_api/batch.h"

#include <cmath>
#include <string>

#include "host_api/error.h"

namespace enginery {

void Batch::set(const std::string& name, torch::Tensor tensor) {
  if (!tensors_.empty() && tensor.dim() > 0 && tensor.size(0) != size()) {
    throw EngineryError("has " + std::to_string(tensor.size(0)) + " rows, the batch's other tensors " +
                            std::to_string(size()),
                        "batch['" + name + "']", "one row per sequence in every tensor");
  }
  tensors_[name] = std::move(tensor);
}

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
  for (const auto& [_, tensor] : tensors_) {
    if (tensor.dim() > 0) return tensor.size(0);
  }
  return 0;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  Batch out;
  for (const auto& [name, tensor] : tensors_) out.tensors_[name] = tensor.slice(0, begin, end);
  out.meta_ = meta_;
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
  for (const auto& [name, tensor] : tensors_) out.tensors_[name] = tensor.to(device);
  out.meta_ = meta_;
  return out;
}

}  // namespace enginery
