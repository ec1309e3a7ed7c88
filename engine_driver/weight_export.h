#pragma once
// What a host does with an engine's weights (docs/ARCHITECTURE.md, "The contract", weight export): the stream in a
// dtype for any engine, and the flat buckets a rollout engine's weight receiver consumes.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "host_api/weight_export.h"

namespace enginery {

// The engine's full tensors as a stream in `dtype`, one group at a time: what a rollout engine consumes. Engines
// deriving from WeightExportingEngine gather one unit per group in `dtype` (the cast happens on the shards, before
// the all-gather); any other engine yields everything get_per_tensor_param gives as one group. Collective: every
// rank iterates the stream to its end.
std::unique_ptr<WeightStream> weight_stream(BaseEngine& engine, c10::ScalarType dtype);

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
