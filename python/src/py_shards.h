#pragma once
// This rank's pieces of an engine's weights in Python (host_api/exports.h; docs/ARCHITECTURE.md, "The
// contract"): what enginery.verl's get_per_tensor_param_shard reads. Not collective.
#include <memory>

#include "host_api/exports.h"
#include "python/src/py_convert.h"

namespace enginery {
namespace python {

// Python iterator over ShardStream's groups: each item a list of (name, local, full_shape, flat_offset), `local`
// 1-D and the caller's own.
class PyShardStream {
 public:
  PyShardStream(std::shared_ptr<BaseEngine> engine, c10::ScalarType dtype);
  py::list next();  // raises StopIteration after the empty group

 private:
  std::shared_ptr<BaseEngine> engine_;  // the stream reads the engine's shards: keep it alive
  std::unique_ptr<ShardStream> stream_;
};

void bind_shards(py::module_& m);

}  // namespace python
}  // namespace enginery
