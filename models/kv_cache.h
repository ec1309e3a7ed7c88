#pragma once
// The keys and values of every decoder layer for incremental decoding (models/generation.h): each step runs only
// the new tokens and attends to what earlier steps stored here.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/model_args.h"

namespace enginery {
namespace models {

class KVCache {
 public:
  // Room for `capacity` tokens of `batch` rows, allocated once: appending never reallocates or copies earlier steps.
  KVCache(const ModelArgs& args, int64_t batch, int64_t capacity, const torch::TensorOptions& options);

  // Writes layer `layer`'s keys and values of the new tokens, k/v [B, Hkv, T, D] (keys after RoPE), behind the
  // cached ones; returns views of all of them, [B, Hkv, length() + T, D]. Every layer appends the same T before
  // advance(T).
  std::pair<torch::Tensor, torch::Tensor> append(size_t layer, const torch::Tensor& k, const torch::Tensor& v);
  void advance(int64_t tokens);

  int64_t length() const { return length_; }  // tokens cached (the same in every layer)
  int64_t capacity() const { return capacity_; }
  size_t num_layers() const { return keys_.size(); }

 private:
  std::vector<torch::Tensor> keys_, values_;  // per layer [B, Hkv, capacity, D]
  int64_t capacity_;
  int64_t length_ = 0;
};

}  // namespace models
}  // namespace enginery
