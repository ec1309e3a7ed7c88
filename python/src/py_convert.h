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

// A dict of tensors plus scalar metadata (bool, int, float, str: verl's non-tensor batch entries) -> Batch. Any
// other value raises EngineryError naming the key.
Batch batch_from_dict(const py::dict& batch);
// A micro-batch as the loss function sees it: its tensors and metadata in one dict.
py::dict dict_from_batch(const Batch& batch);
// What the model produced for the loss: log_probs / entropy / values, only those defined.
py::dict dict_from_output(const ModelOutput& output);
// What a Python loss function returned: (loss, metrics) or a bare loss; metric values are tensors or numbers.
LossResult loss_result_from(const py::object& returned);
// verl's result layout {"loss", "model_output", "metrics"}; with `trained`, also "grad_norm" and "lr".
py::dict dict_from_batch_output(const BatchOutput& output, bool trained);

}  // namespace python
}  // namespace enginery
