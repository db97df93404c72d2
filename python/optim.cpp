// ringflow.optim: SGD, Adam and AdamW (with state_dict / load_state_dict), the learning-rate
// schedules as torch.optim.lr_scheduler's classes, GradScaler, and
// ringflow.nn.utils.clip_grad_norm_. Steps release the GIL.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/optim/optim.h"

namespace ringflow::python {
namespace {

// what: the caller, for messages ("SGD").
std::vector<Tensor> parameter_list(const py::iterable& params, const char* what) {
  std::vector<Tensor> out;
  for (const py::handle& p : params) {
    if (!py::isinstance<Tensor>(p))
      throw py::type_error(std::string(what) + ": parameters must be ringflow tensors (e.g. model.parameters()); item " +
                           std::to_string(out.size()) + " is of type " + py::type::of(p).attr("__name__").cast<std::string>());
    out.push_back(p.cast<Tensor>());
  }
  return out;
}

// An optimizer's parameters: as PyTorch, an empty list is refused (a generator used up).
std::vector<Tensor> optimizer_parameters(const py::iterable& params, const char* what) {
  std::vector<Tensor> out = parameter_list(params, what);
  if (out.empty()) throw py::value_error(std::string(what) + ": got an empty parameter list");
  return out;
}

py::dict state_dict(const optim::Optimizer& o) {
  py::dict out;
  for (const auto& [name, t] : o.state_dict()) out[py::str(name)] = py::cast(t);
  return out;
}

void load_state_dict(optim::Optimizer& o, const py::dict& state) {
  std::map<std::string, Tensor> entries;
  for (const auto& [key, value] : state) entries[key.cast<std::string>()] = as_tensor(value);
  py::gil_scoped_release release;
  o.load_state_dict(entries);
}

void bind_optimizers(py::module_& m) {
  py::class_<optim::Optimizer>(m, "Optimizer")
      .def("step", py::overload_cast<>(&optim::Optimizer::step), release_gil())
      .def("zero_grad", &optim::Optimizer::zero_grad, py::arg("set_to_none") = true, release_gil())
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("params", &optim::Optimizer::params)
      .def("state_dict", &state_dict)
      .def("load_state_dict", &load_state_dict, py::arg("state_dict"));
  py::class_<optim::SGD, optim::Optimizer>(m, "SGD")
      .def(py::init([](const py::iterable& params, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov) {
             return std::make_unique<optim::SGD>(optimizer_parameters(params, "SGD"),
                                                 optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
           }),
           py::arg("params"), py::arg("lr") = 0.01, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  const auto adam_options = [](double lr, std::pair<double, double> betas, double eps, double weight_decay) {
    return optim::AdamOptions{lr, betas.first, betas.second, eps, weight_decay};
  };
  py::class_<optim::Adam, optim::Optimizer>(m, "Adam")
      .def(py::init([adam_options](const py::iterable& params, double lr, std::pair<double, double> betas,
                                   double eps, double weight_decay) {
             return std::make_unique<optim::Adam>(optimizer_parameters(params, "Adam"), adam_options(lr, betas, eps, weight_decay));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  py::class_<optim::AdamW, optim::Adam>(m, "AdamW")
      .def(py::init([adam_options](const py::iterable& params, double lr, std::pair<double, double> betas,
                                   double eps, double weight_decay) {
             return std::make_unique<optim::AdamW>(optimizer_parameters(params, "AdamW"), adam_options(lr, betas, eps, weight_decay));
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2);
}

// A torch.optim.lr_scheduler object: a schedule driving one optimizer's lr (which it keeps
// alive). SequentialLR takes the schedules of the schedulers it is given. One scheduler per
// optimizer (compose with SequentialLR rather than chaining).
struct Scheduler {
  std::shared_ptr<const optim::LRSchedule> schedule;
  std::unique_ptr<optim::LRScheduler> driver;
};

void bind_schedulers(py::module_& optim) {
  py::module_ m = optim.def_submodule("lr_scheduler", "Learning-rate schedules, as torch.optim.lr_scheduler.");
  py::class_<Scheduler>(m, "LRScheduler")
      .def("step", [](Scheduler& s) { s.driver->step(); })
      .def("get_last_lr", [](const Scheduler& s) { return std::vector<double>{s.driver->lr()}; })
      .def_property("last_epoch", [](const Scheduler& s) { return s.driver->epoch(); },
                    [](Scheduler& s, int64_t epoch) { s.driver->set_epoch(epoch); })
      .def_property_readonly("base_lrs", [](const Scheduler& s) { return std::vector<double>{s.driver->base_lr()}; });
  const auto make = [](optim::Optimizer& o, std::shared_ptr<const optim::LRSchedule> schedule) {
    return Scheduler{schedule, std::make_unique<optim::LRScheduler>(o, schedule)};
  };
  m.def("StepLR", [make](optim::Optimizer& o, int64_t step_size, double gamma) {
    return make(o, std::make_shared<optim::StepLR>(step_size, gamma));
  }, py::arg("optimizer"), py::arg("step_size"), py::arg("gamma") = 0.1, py::keep_alive<0, 1>());
  m.def("MultiStepLR", [make](optim::Optimizer& o, std::vector<int64_t> milestones, double gamma) {
    return make(o, std::make_shared<optim::MultiStepLR>(std::move(milestones), gamma));
  }, py::arg("optimizer"), py::arg("milestones"), py::arg("gamma") = 0.1, py::keep_alive<0, 1>());
  m.def("CosineAnnealingLR", [make](optim::Optimizer& o, int64_t t_max, double eta_min) {
    return make(o, std::make_shared<optim::CosineAnnealingLR>(t_max, eta_min));
  }, py::arg("optimizer"), py::arg("T_max"), py::arg("eta_min") = 0.0, py::keep_alive<0, 1>());
  m.def("LinearLR", [make](optim::Optimizer& o, double start, double end, int64_t total) {
    return make(o, std::make_shared<optim::LinearLR>(start, end, total));
  }, py::arg("optimizer"), py::arg("start_factor") = 1.0 / 3, py::arg("end_factor") = 1.0,
     py::arg("total_iters") = 5, py::keep_alive<0, 1>());
  m.def("SequentialLR", [make](optim::Optimizer& o, const std::vector<const Scheduler*>& schedulers,
                               std::vector<int64_t> milestones) {
    std::vector<std::shared_ptr<const optim::LRSchedule>> schedules;
    for (const Scheduler* s : schedulers) schedules.push_back(s->schedule);
    // Each scheduler made set the lr; the base is the one the first found.
    if (!schedulers.empty()) o.set_lr(schedulers.front()->driver->base_lr());
    return make(o, std::make_shared<optim::SequentialLR>(std::move(schedules), std::move(milestones)));
  }, py::arg("optimizer"), py::arg("schedulers"), py::arg("milestones"), py::keep_alive<0, 1>());
}

void bind_grad_scaler(py::module_& m) {
  py::class_<optim::GradScaler>(m, "GradScaler",
      "Dynamic loss scaling for float16 mixed precision (torch.cuda.amp.GradScaler).")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval) {
             return optim::GradScaler({init_scale, growth_factor, backoff_factor, growth_interval});
           }),
           py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0,
           py::arg("backoff_factor") = 0.5, py::arg("growth_interval") = 2000)
      .def("scale", &optim::GradScaler::scale, py::arg("outputs"), release_gil())
      .def("unscale_", &optim::GradScaler::unscale_, py::arg("optimizer"), release_gil())
      .def("step", &optim::GradScaler::step, py::arg("optimizer"), release_gil())
      .def("update", &optim::GradScaler::update)
      .def("get_scale", &optim::GradScaler::get_scale)
      .def("state_dict", &optim::GradScaler::state_dict)
      .def("load_state_dict", &optim::GradScaler::load_state_dict, py::arg("state_dict"));
}

}  // namespace

void bind_optim(py::module_& optim, py::module_& nn_utils) {
  bind_optimizers(optim);
  bind_schedulers(optim);
  bind_grad_scaler(optim);
  nn_utils.def("clip_grad_norm_", [](const py::iterable& params, double max_norm, double norm_type) {
    const std::vector<Tensor> list = parameter_list(params, "clip_grad_norm_");
    py::gil_scoped_release release;
    return optim::clip_grad_norm_(list, max_norm, norm_type);
  }, py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
     "Scales the gradients in place so that their norm is at most max_norm; returns the norm "
     "before clipping (a float; PyTorch returns it as a tensor).");
}

}  // namespace ringflow::python
