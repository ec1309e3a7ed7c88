#include "plugin/fsdp/shard_layout.h"

#include <algorithm>

namespace enginery {
namespace fsdp {

FlatParamLayout::FlatParamLayout(std::vector<std::vector<int64_t>> shapes, int64_t world)
    : ShardLayout(std::move(shapes), world) {
  int64_t total = 0;
  for (const auto& s : shapes_) {
    offsets_.push_back(total);
    total += c10::multiply_integers(s);
  }
  set_shard_numel((total + world_ - 1) / world_);
}

void FlatParamLayout::pack(const std::vector<torch::Tensor>& full, torch::Tensor& packed) const {
  packed.zero_();
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (!full[i].defined()) continue;
    packed.narrow(0, offsets_[i], full[i].numel()).copy_(full[i].reshape(-1));
  }
}

std::vector<torch::Tensor> FlatParamLayout::unpack(const torch::Tensor& packed) const {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    out.push_back(packed.narrow(0, offsets_[i], c10::multiply_integers(shapes_[i])).view(shapes_[i]));
  }
  return out;
}

std::vector<ShardRange> FlatParamLayout::owned_ranges(int64_t rank) const {
  const int64_t lo = rank * shard_numel_, hi = lo + shard_numel_;
  std::vector<ShardRange> out;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const int64_t p_lo = offsets_[i], p_hi = p_lo + c10::multiply_integers(shapes_[i]);
    const int64_t a = std::max(lo, p_lo), b = std::min(hi, p_hi);
    if (a < b) out.push_back({i, a - p_lo, b - p_lo, a - lo});
  }
  return out;
}

}  // namespace fsdp
}  // namespace enginery
