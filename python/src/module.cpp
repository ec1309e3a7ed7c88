// enginery._enginery: the C++ engines from Python (python/enginery/__init__.py wraps it; docs/ARCHITECTURE.md,
// "The contract"). Built against the LibTorch of the torch that imports it, so tensors and process groups are
// torch's own objects on both sides.
#include "host_api/error.h"
#include "host_api/grad_scaler.h"
#include "engine_driver/precision.h"
#include "python/src/py_engine.h"
#include "python/src/py_factory.h"
#include "python/src/py_shards.h"
#include "python/src/py_train_state.h"
#include "python/src/py_weights.h"

namespace py = pybind11;
using enginery::BaseEngine;
using enginery::GradScaler;
using enginery::LossContext;
using enginery::ModeOptions;
using enginery::PrecisionType;
using enginery::python::EngineRequest;
using enginery::python::ModeContext;
using enginery::python::PyEngine;
using enginery::python::PyShardStream;
using enginery::python::PyWeightBuckets;
using enginery::python::PyWeightStream;

namespace {

void bind_loss_context(py::module_& m) {
  py::class_<LossContext>(m, "LossContext", "What the micro-batch loop tells the loss about the whole call.")
      .def_readonly("global_num_tokens", &LossContext::global_num_tokens,
                    "Target tokens of all micro-batches on all data-parallel ranks: divide the token sum by it.")
      .def_readonly("rows", &LossContext::rows,
                    "The call's batch rows (sequences) in this micro-batch, in order: a list of ints.")
      .def_readonly("dp_size", &LossContext::dp_size)
      .def_readonly("micro_batch_index", &LossContext::micro_batch_index)
      .def_readonly("num_micro_batches", &LossContext::num_micro_batches)
      .def_readonly("calculate_entropy", &LossContext::calculate_entropy)
      .def("is_last_micro_batch", &LossContext::is_last_micro_batch);
}

void bind_engine(py::module_& m) {
  py::class_<ModeContext>(m, "ModeContext")
      .def("__enter__", [](ModeContext& self) { self.enter(); })
      .def("__exit__", [](ModeContext& self, const py::object& exc_type, const py::object&, const py::object&) {
        self.exit(!exc_type.is_none());
        return false;  // never swallows the block's exception
      });
  py::class_<PyEngine, std::shared_ptr<PyEngine>> engine(m, "Engine");
  engine
      .def("initialize", &PyEngine::initialize)
      .def(
          "train_mode",
          [](const PyEngine& self, bool zero_grad_on_exit, bool disable_auto_offload) {
            return self.mode(true, ModeOptions{zero_grad_on_exit, disable_auto_offload});
          },
          py::arg("zero_grad_on_exit") = true, py::arg("disable_auto_offload") = false)
      .def(
          "eval_mode",
          [](const PyEngine& self, bool disable_auto_offload) {
            return self.mode(false, ModeOptions{false, disable_auto_offload});
          },
          py::arg("disable_auto_offload") = false)
      .def_property_readonly("is_training", &PyEngine::is_training)
      .def_property_readonly("mode", &PyEngine::mode_name)
      .def("forward_backward_batch", &PyEngine::forward_backward_batch, py::arg("batch"), py::arg("loss_fn"),
           py::arg("forward_only") = false)
      .def("train_batch", &PyEngine::train_batch, py::arg("batch"), py::arg("loss_fn"))
      .def("infer_batch", &PyEngine::infer_batch, py::arg("batch"), py::arg("loss_fn") = py::none())
      .def("optimizer_zero_grad", &PyEngine::optimizer_zero_grad)
      .def("optimizer_step", &PyEngine::optimizer_step)
      .def("lr_scheduler_step", &PyEngine::lr_scheduler_step)
      .def("save_checkpoint", &PyEngine::save_checkpoint, py::arg("path"), py::arg("global_step") = 0,
           py::arg("max_ckpt_to_keep") = py::none())
      .def("load_checkpoint", &PyEngine::load_checkpoint, py::arg("path"))
      .def("to", &PyEngine::to, py::arg("device"), py::arg("model") = true, py::arg("optimizer") = true,
           py::arg("grad") = true)
      // What the engine computes in, read-only (docs/ARCHITECTURE.md, "Precision"): param/reduce/buffer dtypes as
      // "fp32" / "bf16" / "fp16" (autocast runs in param_dtype; fp32 is no autocast), and the grad scaler's state,
      // None when the engine does not scale its loss.
      .def_property_readonly("precision", [](const PyEngine& self) {
        const BaseEngine& engine = *self.engine();
        py::dict out;
        out["param_dtype"] = PrecisionType::to_str(engine.precision().param_dtype);
        out["reduce_dtype"] = PrecisionType::to_str(engine.precision().reduce_dtype);
        out["buffer_dtype"] = PrecisionType::to_str(engine.precision().buffer_dtype);
        out["autocast"] = engine.precision().param_dtype != c10::kFloat;
        py::object scaler = py::none();
        if (const GradScaler* s = engine.grad_scaler()) {
          py::dict state;
          state["scale"] = s->current_scale();
          state["growth_factor"] = s->growth_factor();
          state["backoff_factor"] = s->backoff_factor();
          state["growth_interval"] = s->growth_interval();
          state["growth_tracker"] = s->growth_tracker();
          state["last_step_skipped"] = s->last_step_skipped();
          scaler = std::move(state);
        }
        out["grad_scaler"] = scaler;
        return out;
      })
      .def("get_data_parallel_rank", &PyEngine::data_parallel_rank)
      .def("get_data_parallel_size", &PyEngine::data_parallel_size)
      // Collective (every rank iterates to the end); enginery.Engine.get_per_tensor_param wraps weight_stream.
      .def(
          "weight_stream",
          [](const PyEngine& self, const py::handle& dtype) {
            return PyWeightStream(self.engine(), enginery::python::dtype_from(dtype, "weight_stream"));
          },
          py::arg("dtype"))
      .def(
          "weight_buckets",
          [](const PyEngine& self, const py::handle& dtype, int64_t bucket_bytes) {
            return PyWeightBuckets(self.engine(), enginery::python::dtype_from(dtype, "weight_buckets"),
                                   bucket_bytes);
          },
          py::arg("dtype"), py::arg("bucket_bytes"))
      // This rank's pieces, nothing gathered (host_api/exports.h): not collective. EngineryError naming the
      // capability 'shard-export' for an engine without it; enginery.Engine.get_per_tensor_param_shard wraps it.
      .def(
          "shard_stream",
          [](const PyEngine& self, const py::handle& dtype) {
            return PyShardStream(self.engine(), enginery::python::dtype_from(dtype, "shard_stream"));
          },
          py::arg("dtype"))
      .def_property_readonly("shard_placement", [](const PyEngine& self) {
        const auto placement =
            self.engine()->shard_placement();
        py::dict out;
        out["group_ranks"] = py::cast(placement.group_ranks);
        out["contributes"] = placement.contributes;
        return out;
      });
  enginery::python::bind_train_state(engine);
}

}  // namespace

PYBIND11_MODULE(_enginery, m) {
  m.doc() = "enginery's C++ training engines (use the enginery package, not this module)";
  py::register_exception<enginery::EngineryError>(m, "EngineryError", PyExc_RuntimeError);
  bind_loss_context(m);
  bind_engine(m);
  enginery::python::bind_weights(m);
  enginery::python::bind_shards(m);
  m.def("_load_plugins", &enginery::python::load_plugins, py::arg("dirs"), py::arg("bundled"));
  m.def("_plugins", &enginery::python::plugins);
  m.def("_engine_config_keys", &enginery::python::engine_config_keys);
  m.def(
      "_new_engine",
      [](std::string model_type, std::string backend, std::string device, const py::list& config,
         const py::object& group, const py::object& store, int64_t local_rank) {
        const EngineRequest request{std::move(model_type), std::move(backend), std::move(device),
                                    enginery::python::from_python_config(config), local_rank};
        return enginery::python::new_engine(request, group, store);
      },
      py::arg("model_type"), py::arg("backend"), py::arg("device"), py::arg("config"), py::arg("group"),
      py::arg("store"), py::arg("local_rank"));
}
