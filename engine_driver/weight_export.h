#pragma once
// The flat buckets a rollout engine's weight receiver consumes, packed from an engine's weight stream
// (BaseEngine::export_weights; docs/ARCHITECTURE.md, "The contract", weight export).
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host_api/exports.h"

namespace enginery {

// Where one tensor sits in a bucket's flat buffer (offset and numel in elements of the bucket's dtype).
struct BucketEntry {
  std::string name;
  int64_t offset = 0;
  int64_t numel = 0;
  std::vector<int64_t> shape;
};

// One flat buffer and its table: what rollout weight receivers consume.
struct WeightBucket {
  torch::Tensor buffer;  // 1-D, the stream's dtype and device
  std::vector<BucketEntry> entries;
};

// Packs a WeightStream into buckets of at most `bucket_bytes` (a tensor larger than that gets a bucket of its own),
// in the stream's order. Collective like the stream it reads.
class WeightBucketer {
 public:
  WeightBucketer(std::unique_ptr<WeightStream> stream, int64_t bucket_bytes);
  // The next bucket; false when the stream is exhausted. The buffer is the caller's (never reused).
  bool next(WeightBucket& bucket);

 private:
  std::unique_ptr<WeightStream> stream_;
  int64_t bucket_bytes_;
  std::vector<NamedTensor> pending_;
  size_t pending_pos_ = 0;
  bool exhausted_ = false;
};

}  // namespace enginery
