#pragma once
// The engine as Python sees it: BaseEngine's methods with the GIL released around the C++ compute and taken back
// in the Python loss callback (docs/ARCHITECTURE.md, "One step"). Batches and results are dicts (py_convert.h).
#include <memory>
#include <optional>

#include "python/src/py_convert.h"
#include "engine_driver/batch_check.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace python {

// `with engine.train_mode():` / `eval_mode()`: the mode holds inside the block, the previous one comes back after
// (engine_driver/mode_guard.h, verl's context arguments in ModeOptions).
class ModeContext {
 public:
  ModeContext(std::shared_ptr<BaseEngine> engine, bool training, ModeOptions options);
  void enter();
  void exit(bool raised);  // `raised`: the block ended with an exception

 private:
  std::shared_ptr<BaseEngine> engine_;
  bool training_;
  ModeOptions options_;
  std::optional<ModeGuard> guard_;
};

// `engine` as an owner whose last release frees it without the GIL ([Note: engines die without the GIL]).
std::shared_ptr<BaseEngine> freed_without_gil(std::shared_ptr<BaseEngine> engine);

class PyEngine {
 public:
  // `limits`: what the engine's batches are checked against beyond their layout (engine_driver/batch_check.h).
  PyEngine(std::shared_ptr<BaseEngine> engine, BatchLimits limits);

  void initialize();
  ModeContext mode(bool training, ModeOptions options) const { return ModeContext(engine_, training, options); }
  bool is_training() const { return engine_->is_training(); }
  // verl's engine.mode: "train" or "eval" inside a context, None outside any.
  std::optional<std::string> mode_name() const;

  py::dict forward_backward_batch(const py::dict& batch, const py::object& loss_fn, bool forward_only);
  py::dict train_batch(const py::dict& batch, const py::object& loss_fn);
  py::dict infer_batch(const py::dict& batch, const py::object& loss_fn);

  void optimizer_zero_grad();
  double optimizer_step();  // the global grad norm before clipping; non-finite: the step was skipped
  double lr_scheduler_step();

  void save_checkpoint(const std::string& path, int64_t global_step, std::optional<int64_t> max_ckpt_to_keep);
  void load_checkpoint(const std::string& path);
  // BaseEngine::to: "cpu" or the engine's device ("cuda", "cuda:N"); refused by engines without offload.
  void to(const std::string& device, bool model, bool optimizer, bool grad);

  int64_t data_parallel_rank() const { return engine_->get_data_parallel_rank(); }
  int64_t data_parallel_size() const { return engine_->get_data_parallel_size(); }
  // For the weight iterators (py_weights.h), which keep the engine alive while they stream.
  const std::shared_ptr<BaseEngine>& engine() const { return engine_; }

 private:
  std::shared_ptr<BaseEngine> engine_;
  BatchLimits limits_;
};

// A Python callable loss_fn(model_output, data[, ctx]) -> (loss, metrics) as the contract's LossFn; None: no loss.
// Python's exception leaves the C++ step as py::error_already_set and comes back to the caller as itself.
LossFn python_loss(const py::object& loss_fn);

}  // namespace python
}  // namespace enginery
