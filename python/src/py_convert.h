#pragma once
// Conversions between Python objects and the contract's types (docs/ARCHITECTURE.md, "The contract"). Tensors cross
// as the same at::Tensor (no copy; a tensor made in Python keeps its autograd graph into the C++ model). Every
// function here needs the GIL.
#include <torch/python.h>

#include "engine_driver/step_loop.h"
#include "host_api/base_engine.h"

namespace enginery {
namespace python {

namespace py = pybind11;

// A Python batch as the contract's Batch, and the offsets its outputs go back on.
struct PyBatch {
  Batch batch;
  // A packed call (host_api/batch.h's [Note: packed batch]): its cu_seqlens (input_ids' offsets where it was
  // nested), on which the outputs come back as jagged nested tensors. None: a padded call.
  py::object offsets = py::none();
};

// A dict of tensors plus scalar metadata (bool, int, float, str: verl's non-tensor batch entries) -> Batch. Any
// other value raises EngineryError naming the key. input_ids nested (torch.jagged; a strided nested tensor or a
// list of 1-D tensors is copied into one) makes the batch packed without padding: input_ids = its values(),
// cu_seqlens = its offsets() (int64); another nested entry becomes its values(), refused by name unless its rows
// are input_ids' rows; plain tensors pass as they are (per token [N] or per sequence [S, ...]). A nested entry
// beside a plain input_ids is refused by name.
PyBatch batch_from_dict(const py::dict& batch);
// A micro-batch as the loss function sees it: its tensors and metadata in one dict (a packed one flat, with
// cu_seqlens).
py::dict dict_from_batch(const Batch& batch);
// What the model produced for the loss: log_probs / entropy / values, only those defined.
py::dict dict_from_output(const ModelOutput& output);
// What a Python loss function returned: (loss, metrics) or a bare loss; metric values are tensors or numbers.
LossResult loss_result_from(const py::object& returned);
// verl's result layout {"loss", "model_output", "metrics"}; with `trained`, also "grad_norm" and "lr". The outputs
// of a packed call (`offsets` not None) are jagged nested views of the flat outputs on `offsets`.
py::dict dict_from_batch_output(const BatchOutput& output, bool trained, const py::object& offsets);

}  // namespace python
}  // namespace enginery
