#include "plugin/fsdp/shard_layout.h"

#include <algorithm>

namespace enginery {
namespace fsdp {

PerParamLayout::PerParamLayout(std::vector<std::vector<int64_t>> shapes, int64_t world)
    : ShardLayout(std::move(shapes), world) {
  int64_t offset = 0;
  for (const auto& s : shapes_) {
    const int64_t dim0 = s.empty() ? 1 : s[0];
    const int64_t row = s.empty() ? 1 : c10::multiply_integers(s.begin() + 1, s.end());
    const int64_t rows = (dim0 + world_ - 1) / world_;
    chunk_rows_.push_back(rows);
    chunk_numel_.push_back(rows * row);
    offsets_.push_back(offset);
    offset += rows * row;
  }
  set_shard_numel(offset);
}

void PerParamLayout::pack(const std::vector<torch::Tensor>& full, torch::Tensor& packed) const {
  auto segments = packed.view({world_, shard_numel_});
  for (size_t i = 0; i < shapes_.size(); ++i) {
    auto dst = segments.narrow(1, offsets_[i], chunk_numel_[i]);  // [world, chunk]
    if (!full[i].defined()) {
      dst.zero_();
      continue;
    }
    // Pad the flattened parameter to world whole chunks, then each rank's chunk is one row of the view.
    auto padded = torch::zeros({world_ * chunk_numel_[i]}, packed.options());
    padded.narrow(0, 0, full[i].numel()).copy_(full[i].reshape(-1));
    dst.copy_(padded.view({world_, chunk_numel_[i]}));
  }
}

std::vector<torch::Tensor> PerParamLayout::unpack(const torch::Tensor& packed) const {
  auto segments = packed.view({world_, shard_numel_});
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const int64_t numel = c10::multiply_integers(shapes_[i]);
    auto chunks = segments.narrow(1, offsets_[i], chunk_numel_[i]).reshape(-1);  // copies: strided across ranks
    out.push_back(chunks.narrow(0, 0, numel).view(shapes_[i]));
  }
  return out;
}

std::vector<ShardRange> PerParamLayout::owned_ranges(int64_t rank) const {
  std::vector<ShardRange> out;
  for (size_t i = 0; i < shapes_.size(); ++i) {
    const int64_t numel = c10::multiply_integers(shapes_[i]);
    const int64_t a = rank * chunk_numel_[i], b = std::min(numel, a + chunk_numel_[i]);
    if (a < b) out.push_back({i, a, b, offsets_[i]});
  }
  return out;
}

}  // namespace fsdp
}  // namespace enginery
