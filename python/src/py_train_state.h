#pragma once
// This rank's trainable state in Python (host_api/exports.h; docs/ARCHITECTURE.md, "The contract"): what
// enginery.verl's engine.module and engine.optimizer read and write. Not collective.
#include <memory>

#include "python/src/py_engine.h"

namespace enginery {
namespace python {

// Adds to the Engine class: local_parameters() -> [(name, full_shape, flat_offset, param, grad or None)], views of
// the engine's storage; the property optimizer_hyperparameters, a dict {lr, betas, eps, weight_decay} read and
// written whole. EngineryError naming the capability 'train-state' for an engine without it.
void bind_train_state(py::class_<PyEngine, std::shared_ptr<PyEngine>>& engine);

}  // namespace python
}  // namespace enginery
