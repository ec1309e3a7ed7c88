#include "engine_driver/weight_export.h"

#include <algorithm>
#include <utility>

#include "host_api/error.h"

namespace enginery {
WeightBucketer::WeightBucketer(std::unique_ptr<WeightStream> stream, int64_t bucket_bytes)
    : stream_(std::move(stream)), bucket_bytes_(bucket_bytes) {
  if (bucket_bytes_ <= 0) {
    throw EngineryError("bucket size " + std::to_string(bucket_bytes_) + " bytes", "WeightBucketer", "> 0 bytes");
  }
}

bool WeightBucketer::next(WeightBucket& bucket) {
  bucket = WeightBucket{};
  int64_t used = 0;  // elements
  while (true) {
    if (pending_pos_ == pending_.size()) {
      if (exhausted_) break;
      // What was copied out of the previous group is in the bucket: release it before the stream gathers the next,
      // so no more than one group is alive at a time.
      pending_.clear();
      pending_ = stream_->next();
      pending_pos_ = 0;
      if (pending_.empty()) {
        exhausted_ = true;
        break;
      }
    }
    const torch::Tensor& t = pending_[pending_pos_].tensor;
    if (!bucket.buffer.defined()) {
      // Allocated once at the bucket's size (or the tensor's, when larger) and filled in place: no growing.
      const int64_t capacity = std::max<int64_t>(t.numel(), bucket_bytes_ / static_cast<int64_t>(t.element_size()));
      bucket.buffer = torch::empty({capacity}, t.options());
    } else if (t.scalar_type() != bucket.buffer.scalar_type()) {
      throw EngineryError("tensor '" + pending_[pending_pos_].name + "' has another dtype than the stream's first",
                          "WeightBucketer", "one dtype per stream");
    }
    if (used > 0 && used + t.numel() > bucket.buffer.numel()) break;
    bucket.buffer.narrow(0, used, t.numel()).view(t.sizes()).copy_(t, /*non_blocking=*/true);
    bucket.entries.push_back({pending_[pending_pos_].name, used, t.numel(), t.sizes().vec()});
    used += t.numel();
    ++pending_pos_;
  }
  if (bucket.entries.empty()) return false;
  bucket.buffer = bucket.buffer.narrow(0, 0, used);
  return true;
}

}  // namespace enginery
