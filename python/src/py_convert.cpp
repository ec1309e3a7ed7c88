#include "python/src/py_convert.h"

#include "engine_driver/batch_check.h"
#include "host_api/error.h"

namespace enginery {
namespace python {
namespace {

const char* kBatchAllowed = "torch.Tensor, bool, int, float, str";

MetaValue meta_from(const std::string& key, const py::handle& value) {
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  const std::string type_name = py::str(py::type::handle_of(value).attr("__name__"));
  throw EngineryError("batch['" + key + "'] is a " + type_name, "forward_backward_batch", kBatchAllowed);
}

py::object object_from(const MetaValue& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

py::dict dict_from_tensors(const std::map<std::string, torch::Tensor>& tensors) {
  py::dict out;
  for (const auto& [name, tensor] : tensors) out[py::str(name)] = py::cast(tensor);
  return out;
}

}  // namespace

Batch batch_from_dict(const py::dict& batch) {
  Batch out;
  for (const auto& [key_handle, value] : batch) {
    if (!py::isinstance<py::str>(key_handle)) {
      throw EngineryError("a batch key is not a string", "forward_backward_batch", "str keys");
    }
    const std::string key = key_handle.cast<std::string>();
    if (THPVariable_Check(value.ptr())) {
      if (py::getattr(value, "is_nested").cast<bool>()) throw nested_tensor_refused(key);
      out.set(key, THPVariable_Unpack(value.ptr()));
    } else {
      out.set_meta(key, meta_from(key, value));
    }
  }
  return out;
}

py::dict dict_from_batch(const Batch& batch) {
  py::dict out = dict_from_tensors(batch.tensors());
  for (const auto& [name, value] : batch.all_meta()) out[py::str(name)] = object_from(value);
  return out;
}

py::dict dict_from_output(const ModelOutput& output) {
  py::dict out;
  if (output.log_probs.defined()) out["log_probs"] = py::cast(output.log_probs);
  if (output.entropy.defined()) out["entropy"] = py::cast(output.entropy);
  if (output.values.defined()) out["values"] = py::cast(output.values);
  return out;
}

LossResult loss_result_from(const py::object& returned) {
  const char* where = "loss_fn";
  const char* allowed = "a tuple (loss: torch.Tensor, metrics: dict) or a torch.Tensor";
  py::object loss = returned;
  py::object metrics = py::none();
  if (py::isinstance<py::tuple>(returned)) {
    const py::tuple pair = returned.cast<py::tuple>();
    if (pair.size() != 2) throw EngineryError("returned a tuple of " + std::to_string(pair.size()), where, allowed);
    loss = pair[0];
    metrics = pair[1];
  }
  if (!THPVariable_Check(loss.ptr())) throw EngineryError("returned a loss that is not a tensor", where, allowed);
  LossResult result;
  result.loss = THPVariable_Unpack(loss.ptr());
  if (metrics.is_none()) return result;
  if (!py::isinstance<py::dict>(metrics)) throw EngineryError("returned metrics that are not a dict", where, allowed);
  for (const auto& [name, value] : metrics.cast<py::dict>()) {
    const std::string key = py::str(name);
    if (THPVariable_Check(value.ptr())) {
      result.metrics[key] = THPVariable_Unpack(value.ptr());
    } else if (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) {
      result.metrics[key] = torch::tensor(value.cast<double>(), torch::kDouble);
    } else {
      throw EngineryError("metric '" + key + "' is neither a tensor nor a number", where, "torch.Tensor, int, float");
    }
  }
  return result;
}

py::dict dict_from_batch_output(const BatchOutput& output, bool trained) {
  py::dict out;
  out["loss"] = output.loss.defined() ? py::cast(output.loss) : py::none();
  out["model_output"] = dict_from_tensors(output.outputs);
  out["metrics"] = dict_from_tensors(output.metrics);
  if (trained) {
    out["grad_norm"] = output.grad_norm.defined() ? py::cast(output.grad_norm.item<double>()) : py::none();
    out["lr"] = output.lr;
  }
  return out;
}

}  // namespace python
}  // namespace enginery
