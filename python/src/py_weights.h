#pragma once
// An engine's weights streamed into Python by Hugging Face name (host_api/exports.h; docs/ARCHITECTURE.md,
// "The contract"): one group (an FSDP unit) at a time, or packed into flat buckets for a rollout engine. Both are
// collective: every rank iterates to the end, in step.
#include <memory>

#include "engine_driver/weight_export.h"
#include "python/src/py_convert.h"

namespace enginery {
namespace python {

// Python iterator over WeightStream's groups: each item a list of (name, tensor), tensors the caller owns (the
// stream's contract), which enginery.Engine.get_per_tensor_param hands out as they are.
class PyWeightStream {
 public:
  PyWeightStream(std::shared_ptr<BaseEngine> engine, c10::ScalarType dtype);
  py::list next();  // raises StopIteration after the empty group

 private:
  std::shared_ptr<BaseEngine> engine_;  // the stream reads the engine's shards: keep it alive
  std::unique_ptr<WeightStream> stream_;
};

// Python iterator over WeightBucketer: each item (buffer, [(name, offset, numel, shape), ...]); the buffer is the
// caller's (never reused).
class PyWeightBuckets {
 public:
  PyWeightBuckets(std::shared_ptr<BaseEngine> engine, c10::ScalarType dtype, int64_t bucket_bytes);
  py::tuple next();  // raises StopIteration when the stream is exhausted

 private:
  std::shared_ptr<BaseEngine> engine_;
  std::unique_ptr<WeightBucketer> bucketer_;
};

// torch.dtype -> ScalarType; anything else raises EngineryError naming `where`.
c10::ScalarType dtype_from(const py::handle& dtype, const char* where);

void bind_weights(py::module_& m);

}  // namespace python
}  // namespace enginery
