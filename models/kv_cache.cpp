#include "models/kv_cache.h"

#include <string>

#include "host_api/error.h"

namespace enginery {
namespace models {

KVCache::KVCache(const ModelArgs& args, int64_t batch, int64_t capacity, const torch::TensorOptions& options)
    : capacity_(capacity) {
  for (int64_t i = 0; i < args.num_hidden_layers; ++i) {
    keys_.push_back(torch::empty({batch, args.num_key_value_heads, capacity, args.head_dim}, options));
    values_.push_back(torch::empty({batch, args.num_key_value_heads, capacity, args.head_dim}, options));
  }
}

std::pair<torch::Tensor, torch::Tensor> KVCache::append(size_t layer, const torch::Tensor& k,
                                                         const torch::Tensor& v) {
  const int64_t t = k.size(2);
  if (layer >= keys_.size() || length_ + t > capacity_) {
    throw EngineryError("appending " + std::to_string(t) + " tokens to layer " + std::to_string(layer) +
                            " after " + std::to_string(length_) + " exceeds the cache",
                        "KVCache", std::to_string(keys_.size()) + " layers, " + std::to_string(capacity_) + " tokens");
  }
  keys_[layer].narrow(2, length_, t).copy_(k);
  values_[layer].narrow(2, length_, t).copy_(v);
  return {keys_[layer].narrow(2, 0, length_ + t), values_[layer].narrow(2, 0, length_ + t)};
}

void KVCache::advance(int64_t tokens) { length_ += tokens; }

}  // namespace models
}  // namespace enginery
