#include "python/src/py_shards.h"

#include <utility>

#include "host_api/error.h"
#include "python/src/py_weights.h"

namespace enginery {
namespace python {

PyShardStream::PyShardStream(std::shared_ptr<BaseEngine> engine, c10::ScalarType dtype)
    : engine_(std::move(engine)) {
  py::gil_scoped_release release;
  stream_ = engine_->export_shards(dtype);
}

py::list PyShardStream::next() {
  if (!stream_) throw py::stop_iteration();
  std::vector<LocalShard> group;
  {
    py::gil_scoped_release release;  // casts and copies one unit's shard
    group = stream_->next();
  }
  if (group.empty()) {
    stream_.reset();
    throw py::stop_iteration();
  }
  py::list out;
  for (auto& piece : group) {
    out.append(py::make_tuple(piece.name, std::move(piece.local), py::tuple(py::cast(piece.full_shape)),
                              piece.flat_offset));
  }
  return out;
}

void bind_shards(py::module_& m) {
  py::class_<PyShardStream>(m, "ShardStream",
                            "Iterator over this rank's weight pieces, one group of (name, local, full_shape, "
                            "flat_offset) at a time.")
      .def("__iter__", [](PyShardStream& self) -> PyShardStream& { return self; })
      .def("__next__", &PyShardStream::next);
}

}  // namespace python
}  // namespace enginery
