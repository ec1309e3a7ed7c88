#include "python/src/py_train_state.h"

#include <string>
#include <utility>

#include "host_api/error.h"
#include "host_api/exports.h"

namespace enginery {
namespace python {
namespace {

double number(const py::dict& values, const char* key) {
  if (!values.contains(key)) {
    throw EngineryError(std::string("no '") + key + "'", "optimizer_hyperparameters", "lr, betas, eps, weight_decay");
  }
  return values[key].cast<double>();
}

}  // namespace

void bind_train_state(py::class_<PyEngine, std::shared_ptr<PyEngine>>& engine) {
  engine
      .def("local_parameters",
           [](const PyEngine& self) {
             BaseEngine& state = *self.engine();
             std::vector<LocalParameter> pieces;
             {
               py::gil_scoped_release release;
               pieces = state.local_parameters();
             }
             py::list out;
             for (auto& p : pieces) {
               py::object grad = p.grad.defined() ? py::cast(std::move(p.grad)) : py::none();
               out.append(py::make_tuple(p.name, py::tuple(py::cast(p.full_shape)), p.flat_offset,
                                         std::move(p.param), grad));
             }
             return out;
           })
      .def_property(
          "optimizer_hyperparameters",
          [](const PyEngine& self) {
            const OptimizerHyperparameters h =
                self.engine()->optimizer_hyperparameters();
            py::dict out;
            out["lr"] = h.lr;
            out["betas"] = py::make_tuple(h.beta1, h.beta2);
            out["eps"] = h.eps;
            out["weight_decay"] = h.weight_decay;
            return out;
          },
          [](const PyEngine& self, const py::dict& values) {
            BaseEngine& state = *self.engine();
            OptimizerHyperparameters h;
            h.lr = number(values, "lr");
            h.eps = number(values, "eps");
            h.weight_decay = number(values, "weight_decay");
            if (!values.contains("betas") || py::len(values["betas"]) != 2) {
              throw EngineryError("betas is not a pair", "optimizer_hyperparameters", "(beta1, beta2)");
            }
            const py::sequence betas = values["betas"].cast<py::sequence>();
            h.beta1 = betas[0].cast<double>();
            h.beta2 = betas[1].cast<double>();
            state.set_optimizer_hyperparameters(h);
          });
}

}  // namespace python
}  // namespace enginery
