#include "python/src/py_engine.h"

#include <utility>
#include "engine_driver/step_loop.h"
#include "engine_driver/engine_access.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace python {
namespace {

// Whether `fn` takes a third positional argument (the LossContext): verl's losses take two.
bool takes_context(const py::object& fn) {
  try {
    py::object signature = py::module_::import("inspect").attr("signature")(fn);
    signature.attr("bind")(py::none(), py::none(), py::none());
    return true;
  } catch (const py::error_already_set& e) {
    // TypeError: three do not bind; ValueError: no signature to inspect (a builtin), assume verl's two.
    if (e.matches(PyExc_TypeError) || e.matches(PyExc_ValueError)) return false;
    throw;
  }
}

}  // namespace

ModeContext::ModeContext(std::shared_ptr<BaseEngine> engine, bool training, ModeOptions options)
    : engine_(std::move(engine)), training_(training), options_(options) {}

// The guards may move the whole state to or from the device (offload_outside_modes) and zero the gradients: without
// the GIL, as the engine's own to() and optimizer_zero_grad() run, so the process's other Python threads go on.
void ModeContext::enter() {
  py::gil_scoped_release release;
  guard_.emplace(training_ ? enginery::train_mode(*engine_, options_) : enginery::eval_mode(*engine_, options_));
}

void ModeContext::exit(bool raised) {
  if (!guard_) return;
  ModeGuard guard = std::move(*guard_);
  guard_.reset();
  py::gil_scoped_release release;
  guard.end(raised);
}

// [Note: engines die without the GIL] An engine holds torch's process group (EngineArgs::world_group). When the last
// reference goes from Python (pybind11 frees the object with the GIL held), the group's destructor joins Gloo's
// worker thread, which may itself be waiting for the GIL to drop the Python-owned tensors of a finished collective
// (a barrier's): each waits for the other. torch frees its own process groups without the GIL for this reason; so
// does the last owner of an engine here, whichever object that is (the engine, or a weight stream outliving it).
std::shared_ptr<BaseEngine> freed_without_gil(std::shared_ptr<BaseEngine> engine) {
  auto* owner = new std::shared_ptr<BaseEngine>(std::move(engine));
  return std::shared_ptr<BaseEngine>(owner->get(), [owner](BaseEngine*) {
    if (PyGILState_Check()) {
      py::gil_scoped_release release;
      delete owner;
    } else {
      delete owner;
    }
  });
}

PyEngine::PyEngine(std::shared_ptr<BaseEngine> engine, BatchLimits limits)
    : engine_(freed_without_gil(std::move(engine))), limits_(limits) {}

std::optional<std::string> PyEngine::mode_name() const {
  if (EngineAccess::open_modes(*engine_) == 0) return std::nullopt;
  return engine_->is_training() ? "train" : "eval";
}

void PyEngine::initialize() {
  py::gil_scoped_release release;
  engine_->initialize();
}

LossFn python_loss(const py::object& loss_fn) {
  if (loss_fn.is_none()) return {};
  const bool with_context = takes_context(loss_fn);
  // Engines copy the LossFn without the GIL: copies share one Python reference, dropped under the GIL.
  std::shared_ptr<py::object> fn(new py::object(loss_fn), [](py::object* object) {
    py::gil_scoped_acquire gil;
    delete object;
  });
  return [fn, with_context](const ModelOutput& output, const Batch& micro_batch, const LossContext& ctx) {
    py::gil_scoped_acquire gil;
    py::object returned = with_context ? (*fn)(dict_from_output(output), dict_from_batch(micro_batch), py::cast(ctx))
                                       : (*fn)(dict_from_output(output), dict_from_batch(micro_batch));
    return loss_result_from(returned);
  };
}

py::dict PyEngine::forward_backward_batch(const py::dict& batch, const py::object& loss_fn, bool forward_only) {
  const PyBatch input = batch_from_dict(batch);
  const LossFn loss = python_loss(loss_fn);
  BatchOutput output;
  {
    py::gil_scoped_release release;
    output = enginery::forward_backward_batch(*engine_, input.batch, loss, forward_only, limits_);
  }
  return dict_from_batch_output(output, false, input.offsets);
}

py::dict PyEngine::train_batch(const py::dict& batch, const py::object& loss_fn) {
  const PyBatch input = batch_from_dict(batch);
  const LossFn loss = python_loss(loss_fn);
  BatchOutput output;
  {
    py::gil_scoped_release release;
    output = enginery::train_batch(*engine_, input.batch, loss, limits_);
  }
  return dict_from_batch_output(output, true, input.offsets);
}

py::dict PyEngine::infer_batch(const py::dict& batch, const py::object& loss_fn) {
  const PyBatch input = batch_from_dict(batch);
  const LossFn loss = python_loss(loss_fn);
  BatchOutput output;
  {
    py::gil_scoped_release release;
    output = enginery::infer_batch(*engine_, input.batch, loss, limits_);
  }
  return dict_from_batch_output(output, false, input.offsets);
}

void PyEngine::optimizer_zero_grad() {
  py::gil_scoped_release release;
  engine_->optimizer_zero_grad();
}

double PyEngine::optimizer_step() {
  py::gil_scoped_release release;
  return engine_->optimizer_step().item<double>();
}

double PyEngine::lr_scheduler_step() {
  py::gil_scoped_release release;
  return engine_->lr_scheduler_step();
}

void PyEngine::save_checkpoint(const std::string& path, int64_t global_step, std::optional<int64_t> max_ckpt_to_keep) {
  py::gil_scoped_release release;
  // verl's None keeps every checkpoint, as max_ckpt_to_keep <= 0 does here.
  engine_->save_checkpoint(path, global_step, max_ckpt_to_keep.value_or(0));
}

void PyEngine::load_checkpoint(const std::string& path) {
  py::gil_scoped_release release;
  engine_->load_checkpoint(path);
}

void PyEngine::to(const std::string& device, bool model, bool optimizer, bool grad) {
  const torch::Device target(device);  // before releasing the GIL: a bad spelling raises here
  py::gil_scoped_release release;
  engine_->to(target, model, optimizer, grad);
}

}  // namespace python
}  // namespace enginery
