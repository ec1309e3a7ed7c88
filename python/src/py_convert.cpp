#include "python/src/py_convert.h"

#include <optional>
#include <string>
#include <vector>

#include "host_api/error.h"

namespace enginery {
namespace python {
namespace {

const char* kBatchAllowed = "torch.Tensor, bool, int, float, str";
const char* kWhere = "forward_backward_batch";

std::string field(const std::string& name) { return "batch['" + name + "']"; }

MetaValue meta_from(const std::string& key, const py::handle& value) {
  // bool before int: Python's bool is an int.
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  const std::string type_name = py::str(py::type::handle_of(value).attr("__name__"));
  throw EngineryError("batch['" + key + "'] is a " + type_name, kWhere, kBatchAllowed);
}

py::object object_from(const MetaValue& value) {
  return std::visit([](const auto& v) -> py::object { return py::cast(v); }, value);
}

py::dict dict_from_tensors(const std::map<std::string, torch::Tensor>& tensors) {
  py::dict out;
  for (const auto& [name, tensor] : tensors) out[py::str(name)] = py::cast(tensor);
  return out;
}

bool is_tensor(const py::handle& value) { return THPVariable_Check(value.ptr()); }

bool is_nested(const py::handle& value) {
  return is_tensor(value) && py::getattr(value, "is_nested").cast<bool>();
}

// A list or tuple of tensors (one per sequence), as verl's older layouts and hand-written batches hold rows.
bool is_tensor_list(const py::handle& value) {
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) return false;
  for (const auto& item : value) {
    if (!is_tensor(item)) return false;
  }
  return true;
}

// A jagged entry as the packed batch holds it: the rows back to back and where each ends.
struct Jagged {
  torch::Tensor values;
  torch::Tensor offsets;     // int64 [rows + 1]
  py::object offsets_object;  // the offsets as the caller's tensor holds them (jagged: the same Python object)
};

// A jagged nested tensor whose values() are its rows back to back: contiguous, ragged in dim 1.
bool views_as_packed(const py::handle& value) {
  const py::object jagged = py::module_::import("torch").attr("jagged");
  const py::object layout = value.attr("layout");
  return layout.is(jagged) && value.attr("_lengths").is_none() &&
         value.attr("_ragged_idx").cast<int64_t>() == 1;
}

Jagged jagged_from(const std::string& key, const py::handle& value) {
  if (is_nested(value) && views_as_packed(value)) {
    py::object offsets = value.attr("offsets")();
    torch::Tensor off = THPVariable_Unpack(offsets.ptr());
    return {THPVariable_Unpack(value.attr("values")().ptr()), off.to(torch::kLong), offsets};
  }
  // A strided nested tensor, a jagged one with holes or ragged elsewhere, or a list: its rows copied into one.
  const py::list rows = is_nested(value) ? py::list(value.attr("unbind")()) : py::list(py::reinterpret_borrow<py::object>(value));
  if (rows.size() == 0) throw EngineryError("has no rows", field(key), "one or more sequences");
  std::vector<torch::Tensor> parts;
  std::vector<int64_t> offsets{0};
  for (size_t i = 0; i < rows.size(); ++i) {
    torch::Tensor row = THPVariable_Unpack(rows[i].ptr());
    if (row.dim() == 0) {
      throw EngineryError("row " + std::to_string(i) + " is a 0-dim tensor", field(key),
                          "one tensor per sequence, its dim 0 the sequence's tokens");
    }
    offsets.push_back(offsets.back() + row.size(0));
    parts.push_back(std::move(row));
  }
  torch::Tensor values = torch::cat(parts, 0);
  torch::Tensor off = torch::tensor(offsets, torch::kLong).to(values.device());
  return {values, off, py::cast(off)};
}

// Refuses `entry` (nested like input_ids) unless its rows are input_ids' rows, naming the first that is not.
void check_rows(const std::string& key, const Jagged& entry, const Jagged& ids) {
  const int64_t rows = ids.offsets.size(0) - 1;
  if (entry.offsets.size(0) - 1 != rows) {
    throw EngineryError("has " + std::to_string(entry.offsets.size(0) - 1) + " rows, input_ids " +
                            std::to_string(rows),
                        field(key), "one row per row of input_ids");
  }
  if (entry.offsets.is_same(ids.offsets) || torch::equal(entry.offsets.to(ids.offsets.device()), ids.offsets)) return;
  const torch::Tensor got = entry.offsets.diff().cpu();
  const torch::Tensor want = ids.offsets.diff().cpu();
  const int64_t row = got.ne(want).nonzero()[0][0].item<int64_t>();
  throw EngineryError("row " + std::to_string(row) + " has " + std::to_string(got[row].item<int64_t>()) +
                          " entries, input_ids " + std::to_string(want[row].item<int64_t>()),
                      field(key), "one entry per token of input_ids (a nested tensor with input_ids' offsets)");
}

}  // namespace

PyBatch batch_from_dict(const py::dict& batch) {
  PyBatch out;
  for (const auto& [key_handle, value] : batch) {
    if (!py::isinstance<py::str>(key_handle)) throw EngineryError("a batch key is not a string", kWhere, "str keys");
  }
  // input_ids first: nested, it makes the batch packed and gives the rows every other nested entry must have.
  std::optional<Jagged> ids;
  if (batch.contains("input_ids")) {
    const py::object input_ids = batch["input_ids"];
    if (is_nested(input_ids) || is_tensor_list(input_ids)) {
      if (batch.contains("cu_seqlens")) {
        throw EngineryError("is given, and input_ids is nested", field("cu_seqlens"),
                            "a nested input_ids (its offsets are the cu_seqlens) or a flat one with cu_seqlens");
      }
      ids = jagged_from("input_ids", input_ids);
      out.batch.set("input_ids", ids->values);
      out.batch.set("cu_seqlens", ids->offsets);
      out.offsets = ids->offsets_object;
    }
  }
  for (const auto& [key_handle, value] : batch) {
    const std::string key = key_handle.cast<std::string>();
    if (ids && key == "input_ids") continue;
    if (is_nested(value) || (ids && is_tensor_list(value))) {
      if (!ids) {
        throw EngineryError("is a nested tensor, and input_ids is not", field(key),
                            "nested entries beside a nested input_ids (a packed batch), or padded [rows, tokens] "
                            "tensors beside a padded one");
      }
      const Jagged entry = jagged_from(key, value);
      check_rows(key, entry, *ids);
      out.batch.set(key, entry.values);
    } else if (is_tensor(value)) {
      out.batch.set(key, THPVariable_Unpack(value.ptr()));
    } else {
      out.batch.set_meta(key, meta_from(key, value));
    }
  }
  // A packed batch given as the contract spells it: flat input_ids with cu_seqlens.
  if (!ids && batch.contains("cu_seqlens") && is_tensor(batch["cu_seqlens"])) out.offsets = batch["cu_seqlens"];
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

py::dict dict_from_batch_output(const BatchOutput& output, bool trained, const py::object& offsets) {
  py::dict out;
  out["loss"] = output.loss.defined() ? py::cast(output.loss) : py::none();
  if (offsets.is_none()) {
    out["model_output"] = dict_from_tensors(output.outputs);
  } else {
    // Views of the flat outputs (no copy, the autograd graph kept) on the caller's offsets: with a jagged input_ids
    // the outputs share its ragged dimension.
    const py::object from_jagged = py::module_::import("torch").attr("nested").attr("nested_tensor_from_jagged");
    const torch::Tensor& off = THPVariable_Unpack(offsets.ptr());
    py::dict model_output;
    for (const auto& [name, tensor] : output.outputs) {
      const py::object on = off.device() == tensor.device() ? offsets : py::cast(off.to(tensor.device()));
      model_output[py::str(name)] = from_jagged(py::cast(tensor), on);
    }
    out["model_output"] = std::move(model_output);
  }
  out["metrics"] = dict_from_tensors(output.metrics);
  if (trained) {
    out["grad_norm"] = output.grad_norm.defined() ? py::cast(output.grad_norm.item<double>()) : py::none();
    out["lr"] = output.lr;
  }
  return out;
}

}  // namespace python
}  // namespace enginery
