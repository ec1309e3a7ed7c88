#include "python/src/py_weights.h"

#include <utility>

#include "host_api/error.h"
#include "engine_driver/weight_export.h"

namespace enginery {
namespace python {

c10::ScalarType dtype_from(const py::handle& dtype, const char* where) {
  if (!THPDtype_Check(dtype.ptr())) {
    throw EngineryError("the dtype is a " + std::string(py::str(py::type::handle_of(dtype).attr("__name__"))), where,
                        "a torch.dtype (torch.bfloat16, torch.float16, torch.float32)");
  }
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

PyWeightStream::PyWeightStream(std::shared_ptr<BaseEngine> engine, c10::ScalarType dtype)
    : engine_(std::move(engine)) {
  py::gil_scoped_release release;
  stream_ = engine_->export_weights(dtype);
}

py::list PyWeightStream::next() {
  if (!stream_) throw py::stop_iteration();
  std::vector<NamedTensor> group;
  {
    py::gil_scoped_release release;  // a gather over the group: other Python threads may run meanwhile
    group = stream_->next();
  }
  if (group.empty()) {
    stream_.reset();  // exhausted: a further next() must not enter the collective again
    throw py::stop_iteration();
  }
  py::list out;
  for (auto& item : group) out.append(py::make_tuple(item.name, std::move(item.tensor)));
  return out;
}

PyWeightBuckets::PyWeightBuckets(std::shared_ptr<BaseEngine> engine, c10::ScalarType dtype, int64_t bucket_bytes)
    : engine_(std::move(engine)) {
  if (bucket_bytes <= 0) {
    throw EngineryError("bucket_bytes = " + std::to_string(bucket_bytes), "weight_buckets", "a byte count > 0");
  }
  py::gil_scoped_release release;
  bucketer_ = std::make_unique<WeightBucketer>(engine_->export_weights(dtype), bucket_bytes);
}

py::tuple PyWeightBuckets::next() {
  if (!bucketer_) throw py::stop_iteration();
  WeightBucket bucket;
  bool more = false;
  {
    py::gil_scoped_release release;
    more = bucketer_->next(bucket);
  }
  if (!more) {
    bucketer_.reset();
    throw py::stop_iteration();
  }
  py::list entries;
  for (const auto& entry : bucket.entries) {
    entries.append(py::make_tuple(entry.name, entry.offset, entry.numel, py::tuple(py::cast(entry.shape))));
  }
  return py::make_tuple(std::move(bucket.buffer), entries);
}

void bind_weights(py::module_& m) {
  py::class_<PyWeightStream>(m, "WeightStream",
                             "Collective iterator over an engine's weights, one group of (name, tensor) at a time.")
      .def("__iter__", [](PyWeightStream& self) -> PyWeightStream& { return self; })
      .def("__next__", &PyWeightStream::next);
  py::class_<PyWeightBuckets>(m, "WeightBuckets",
                              "Collective iterator over flat weight buckets: (buffer, [(name, offset, numel, shape)]).")
      .def("__iter__", [](PyWeightBuckets& self) -> PyWeightBuckets& { return self; })
      .def("__next__", &PyWeightBuckets::next);
}

}  // namespace python
}  // namespace enginery
