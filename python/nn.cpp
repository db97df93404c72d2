// ringflow.nn: Module (subclassable from Python, as torch.nn.Module: attributes that are
// modules or Parameters register themselves, forward composes ringflow ops), the layers,
// the loss callables, nn.init, and ringflow.models (the registry).
//
// A Module subclass written in Python lives in its Python object. Where C++ keeps such a
// module (a parent's child, a Sequential, DistributedDataParallel), it holds it through
// hold_module, which keeps the Python object alive for as long as C++ needs it.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/nn/nn.h"
#include "ringflow/framework/ops.h"
#include "ringflow/models/registry.h"

namespace ringflow::python {
namespace {

// The trampoline: C++ calls to forward() reach the Python subclass's forward (with the GIL
// taken again), and say so, as torch.nn.Module does, when it has none or returns no Tensor.
class PyModule : public nn::Module {
 public:
  PyModule() : nn::Module("Module") {}
  Tensor forward(const Tensor& x) override {
    py::gil_scoped_acquire gil;
    const py::function fn = py::get_override(static_cast<const nn::Module*>(this), "forward");
    const std::string name = py::type::of(py::cast(static_cast<nn::Module*>(this))).attr("__name__").cast<std::string>();
    if (!fn) {
      PyErr_SetString(PyExc_NotImplementedError, ("Module [" + name + "] is missing the required \"forward\" function").c_str());
      throw py::error_already_set();
    }
    const py::object out = fn(x);
    if (!py::isinstance<Tensor>(out))
      throw py::type_error(name + ".forward returned " + py::type::of(out).attr("__name__").cast<std::string>() +
                           "; a Module that C++ calls (in Sequential or DistributedDataParallel) must return one Tensor");
    return out.cast<Tensor>();
  }
};

// Module's registration functions are protected: for the C++ API they are a subclass's own
// business; from Python, __setattr__ and register_* call them on any module.
struct ModuleAccess : nn::Module {
  using nn::Module::add_child;
  using nn::Module::register_buffer;
  using nn::Module::register_parameter;
};

void add_child(nn::Module& m, const std::string& name, const py::handle& child) {
  (m.*&ModuleAccess::add_child)(name, hold_module(child, "add_module"));
}

py::object own_attribute(nn::Module& m, const std::string& name) {
  for (const auto& [n, child] : m.named_children())
    if (n == name) return py::cast(child);
  for (const auto& [n, t] : m.named_parameters(/*recurse=*/false))
    if (n == name) return py::cast(t);
  for (const auto& [n, t] : m.named_buffers(/*recurse=*/false))
    if (n == name) return py::cast(t);
  return py::object();
}

// torch.nn.Module.__setattr__: Parameters and modules register, anything else is a plain
// attribute. The Parameter object is pointed at the registered tensor, so that it and
// module.name are one tensor.
void set_attribute(const py::object& self, const std::string& name, const py::object& value) {
  auto& m = self.cast<nn::Module&>();
  if (py::isinstance<Parameter>(value)) {
    auto& p = value.cast<Parameter&>();
    static_cast<Tensor&>(p) = (m.*&ModuleAccess::register_parameter)(name, p, p.requires_grad());
  } else if (py::isinstance<nn::Module>(value)) {
    add_child(m, name, value);
  } else {
    py::module_::import("builtins").attr("object").attr("__setattr__")(self, name, value);
  }
}

std::string module_repr(const py::object& self, const std::string& indent) {
  auto& m = self.cast<nn::Module&>();
  std::string name = dynamic_cast<PyModule*>(&m) ? py::type::of(self).attr("__name__").cast<std::string>()
                                                  : m.type_name();
  if (m.named_children().empty()) return name + "()";
  name += "(\n";
  for (const auto& [n, child] : m.named_children())
    name += indent + "  (" + n + "): " + module_repr(py::cast(child), indent + "  ") + "\n";
  return name + indent + ")";
}

py::object state_dict(const nn::Module& m) {
  py::object ordered = py::module_::import("collections").attr("OrderedDict")();
  for (const auto& [name, t] : m.state_dict()) ordered[py::str(name)] = py::cast(t);
  return ordered;
}

// Any mapping of names to tensors: ringflow's, or torch's state_dict (shared through DLPack).
void load_state_dict(nn::Module& m, const py::dict& state, bool strict) {
  NamedTensors named;
  for (const auto& [key, value] : state) named.emplace_back(key.cast<std::string>(), as_tensor(value));
  py::gil_scoped_release release;
  m.load_state_dict(named, strict);
}

py::list named(const NamedTensors& tensors) {
  py::list out;
  for (const auto& [name, t] : tensors) out.append(py::make_tuple(name, t));
  return out;
}

// module.to(dtype), .to(device), .to(device, dtype): in place, returning the module.
py::object module_to(const py::object& self, const py::args& args, const py::kwargs& kwargs) {
  auto& m = self.cast<nn::Module&>();
  std::optional<DType> dtype;
  std::optional<Device> device;
  for (const py::handle& a : args) {
    if (py::isinstance<DType>(a)) dtype = a.cast<DType>();
    else device = a.cast<Device>();
  }
  if (kwargs.contains("dtype")) dtype = kwargs["dtype"].cast<DType>();
  if (kwargs.contains("device")) device = kwargs["device"].cast<Device>();
  py::gil_scoped_release release;
  if (device) m.to(*device);
  if (dtype) m.to(*dtype);
  return self;
}

void bind_module_state(py::class_<nn::Module, PyModule, nn::ModulePtr>& c) {
  c.def("parameters", [](const nn::Module& m, bool recurse) { return m.parameters(recurse); },
        py::arg("recurse") = true)
      .def("named_parameters", [](const nn::Module& m, bool recurse) { return named(m.named_parameters(recurse)); },
           py::arg("recurse") = true)
      .def("buffers", [](const nn::Module& m, bool recurse) { return m.buffers(recurse); },
           py::arg("recurse") = true)
      .def("named_buffers", [](const nn::Module& m, bool recurse) { return named(m.named_buffers(recurse)); },
           py::arg("recurse") = true)
      .def("children", [](const nn::Module& m) {
        std::vector<nn::ModulePtr> out;
        for (const auto& [name, child] : m.named_children()) out.push_back(child);
        return out;
      })
      .def("named_children", [](const nn::Module& m) { return m.named_children(); })
      .def("named_modules", [](const py::object& self) {
        py::list out;
        for (const auto& [name, module] : self.cast<nn::Module&>().named_modules())
          out.append(py::make_tuple(name, name.empty() ? self : py::cast(module)));
        return out;
      })
      .def("modules", [](const py::object& self) {
        py::list out;
        for (const auto& [name, module] : self.cast<nn::Module&>().named_modules())
          out.append(name.empty() ? self : py::cast(module));
        return out;
      })
      .def("state_dict", &state_dict)
      .def("load_state_dict", &load_state_dict, py::arg("state_dict"), py::arg("strict") = true)
      .def("num_parameters", &nn::Module::num_parameters)
      .def("zero_grad", &nn::Module::zero_grad, py::arg("set_to_none") = true)
      .def("register_parameter", [](nn::Module& m, const std::string& name, const Tensor& t) {
        return (m.*&ModuleAccess::register_parameter)(name, t, true);
      }, py::arg("name"), py::arg("param"))
      .def("register_buffer", [](nn::Module& m, const std::string& name, const Tensor& t) {
        return (m.*&ModuleAccess::register_buffer)(name, t);
      }, py::arg("name"), py::arg("tensor"))
      .def("add_module", [](nn::Module& m, const std::string& name, const py::object& child) {
        add_child(m, name, child);
      }, py::arg("name"), py::arg("module"))
      .def("to", &module_to);
}

void bind_module(py::module_& nn) {
  py::class_<nn::Module, PyModule, nn::ModulePtr> c(nn, "Module",
      "The base of layers and models. Subclass it in Python as torch.nn.Module: call "
      "super().__init__(), assign layers and nn.Parameter(...) as attributes, define forward.");
  c.def(py::init<>())
      .def("forward", &nn::Module::forward, py::arg("input"), release_gil())
      .def("__call__", [](const py::object& self, const py::args& args, const py::kwargs& kwargs) {
        return self.attr("forward")(*args, **kwargs);
      })
      .def("train", [](const py::object& self, bool mode) {
        self.cast<nn::Module&>().train(mode);
        return self;
      }, py::arg("mode") = true)
      .def("eval", [](const py::object& self) {
        self.cast<nn::Module&>().eval();
        return self;
      })
      .def_property_readonly("training", &nn::Module::is_training)
      .def("__setattr__", &set_attribute)
      .def("__getattr__", [](const py::object& self, const std::string& name) {
        py::object found = own_attribute(self.cast<nn::Module&>(), name);
        if (!found) {
          throw py::attribute_error("'" + py::type::of(self).attr("__name__").cast<std::string>() +
                                    "' object has no attribute '" + name + "'");
        }
        return found;
      })
      .def("__repr__", [](const py::object& self) { return module_repr(self, ""); });
  bind_module_state(c);
  py::class_<Parameter, Tensor>(nn, "Parameter",
      "A tensor that a Module registers as a parameter when assigned as an attribute.")
      .def(py::init([](const Tensor& data, bool requires_grad) {
             Parameter p(data.detach());
             p.requires_grad_(requires_grad);
             return p;
           }),
           py::arg("data"), py::arg("requires_grad") = true);
}

std::optional<Tensor> maybe(const Tensor& t) {
  if (!t.defined()) return std::nullopt;
  return t;
}

template <class Layer>
using LayerClass = py::class_<Layer, nn::Module, std::shared_ptr<Layer>>;

void bind_layers(py::module_& nn) {
  LayerClass<nn::Linear>(nn, "Linear")
      .def(py::init<int64_t, int64_t, bool, Generator*>(), py::arg("in_features"),
           py::arg("out_features"), py::arg("bias") = true, py::arg("generator") = py::none())
      .def_property_readonly("weight", [](const nn::Linear& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::Linear& l) { return maybe(l.bias); })
      .def_property_readonly("in_features", &nn::Linear::in_features)
      .def_property_readonly("out_features", &nn::Linear::out_features);
  LayerClass<nn::Conv2d>(nn, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, const IntOrPair& kernel, const IntOrPair& stride,
                       const IntOrPair& padding, const IntOrPair& dilation, bool bias, Generator* gen) {
             return std::make_shared<nn::Conv2d>(
                 nn::Conv2dOptions{in, out, pair_of(kernel, "kernel_size"), pair_of(stride, "stride"),
                                   pair_of(padding, "padding"), pair_of(dilation, "dilation"), bias},
                 gen);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("bias") = true, py::arg("generator") = py::none())
      .def_property_readonly("weight", [](const nn::Conv2d& l) { return l.weight; })
      .def_property_readonly("bias", [](const nn::Conv2d& l) { return maybe(l.bias); });
  LayerClass<nn::BatchNorm2d>(nn, "BatchNorm2d")
      .def(py::init([](int64_t features, double eps, std::optional<double> momentum, bool affine,
                       bool track) {
             return std::make_shared<nn::BatchNorm2d>(features, nn::BatchNormOptions{eps, momentum, affine, track});
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.1,
           py::arg("affine") = true, py::arg("track_running_stats") = true)
      .def_property_readonly("weight", [](const nn::BatchNorm2d& l) { return maybe(l.weight); })
      .def_property_readonly("bias", [](const nn::BatchNorm2d& l) { return maybe(l.bias); })
      .def_property_readonly("running_mean", [](const nn::BatchNorm2d& l) { return maybe(l.running_mean); })
      .def_property_readonly("running_var", [](const nn::BatchNorm2d& l) { return maybe(l.running_var); })
      .def_property_readonly("num_batches_tracked",
                             [](const nn::BatchNorm2d& l) { return maybe(l.num_batches_tracked); });
  LayerClass<nn::ReLU>(nn, "ReLU").def(py::init<>());
  LayerClass<nn::Flatten>(nn, "Flatten")
      .def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  LayerClass<nn::Dropout>(nn, "Dropout")
      .def(py::init<double, Generator*>(), py::arg("p") = 0.5, py::arg("generator") = py::none(),
           py::keep_alive<1, 3>())
      .def_property_readonly("p", &nn::Dropout::p);
}

nn::Pool2dOptions pool_options(const IntOrPair& kernel, const std::optional<IntOrPair>& stride,
                               const IntOrPair& padding, bool ceil_mode, bool count_include_pad) {
  nn::Pool2dOptions o{pair_of(kernel, "kernel_size"), std::nullopt, pair_of(padding, "padding"),
                      ceil_mode, count_include_pad};
  if (stride) o.stride = pair_of(*stride, "stride");
  return o;
}

void bind_containers_and_pools(py::module_& nn) {
  LayerClass<nn::MaxPool2d>(nn, "MaxPool2d")
      .def(py::init([](const IntOrPair& kernel, std::optional<IntOrPair> stride, const IntOrPair& padding,
                       bool ceil_mode) {
             return std::make_shared<nn::MaxPool2d>(pool_options(kernel, stride, padding, ceil_mode, true));
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
           py::arg("ceil_mode") = false);
  LayerClass<nn::AvgPool2d>(nn, "AvgPool2d")
      .def(py::init([](const IntOrPair& kernel, std::optional<IntOrPair> stride, const IntOrPair& padding,
                       bool ceil_mode, bool count_include_pad) {
             return std::make_shared<nn::AvgPool2d>(
                 pool_options(kernel, stride, padding, ceil_mode, count_include_pad));
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
           py::arg("ceil_mode") = false, py::arg("count_include_pad") = true);
  LayerClass<nn::AdaptiveAvgPool2d>(nn, "AdaptiveAvgPool2d")
      .def(py::init([](const IntOrPair& size) {
             return std::make_shared<nn::AdaptiveAvgPool2d>(pair_of(size, "output_size"));
           }),
           py::arg("output_size"));
  LayerClass<nn::Sequential>(nn, "Sequential")
      .def(py::init([](const py::args& modules) {
        auto s = std::make_shared<nn::Sequential>();
        for (const py::handle& m : modules) s->push_back(hold_module(m, "Sequential"));
        return s;
      }))
      .def("append", [](const py::object& self, const py::object& module) {
        self.cast<nn::Sequential&>().push_back(hold_module(module, "Sequential.append"));
        return self;
      }, py::arg("module"))
      .def("__len__", &nn::Sequential::size)
      .def("__getitem__", [](const nn::Sequential& s, int64_t i) {
        const auto n = static_cast<int64_t>(s.size());
        if (i < -n || i >= n) throw py::index_error("Sequential index " + std::to_string(i) + " out of range");
        return s[static_cast<size_t>(i < 0 ? i + n : i)];
      });
}

// nn.CrossEntropyLoss() and friends: callables over (input, target), as PyTorch's loss modules.
struct Loss {
  Tensor (*fn)(const Tensor&, const Tensor&, Reduction, double);
  Reduction reduction;
  double label_smoothing;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return fn(input, target, reduction, label_smoothing);
  }
};

void bind_losses(py::module_& nn) {
  py::class_<Loss>(nn, "_Loss").def("__call__", &Loss::operator(), py::arg("input"),
                                    py::arg("target"), release_gil());
  nn.def("CrossEntropyLoss", [](const std::string& reduction, double label_smoothing) {
    return Loss{&cross_entropy, reduction_named(reduction), label_smoothing};
  }, py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0);
  nn.def("NLLLoss", [](const std::string& reduction) {
    return Loss{[](const Tensor& x, const Tensor& t, Reduction r, double) { return nll_loss(x, t, r); },
                reduction_named(reduction), 0.0};
  }, py::arg("reduction") = "mean");
  nn.def("MSELoss", [](const std::string& reduction) {
    return Loss{[](const Tensor& x, const Tensor& t, Reduction r, double) { return mse_loss(x, t, r); },
                reduction_named(reduction), 0.0};
  }, py::arg("reduction") = "mean");
}

nn::init::FanMode fan_mode(const std::string& mode) {
  if (mode == "fan_in") return nn::init::FanMode::fan_in;
  if (mode == "fan_out") return nn::init::FanMode::fan_out;
  throw std::invalid_argument("mode '" + mode + "' (choices: fan_in, fan_out)");
}

// nn.init: each fills the tensor in place and returns it (the same Python object).
void bind_init(py::module_& nn) {
  namespace init = nn::init;
  py::module_ m = nn.def_submodule("init", "Parameter initialisation, as torch.nn.init.");
  const auto tensor = py::arg("tensor");
  const auto gen = py::arg("generator") = py::none();
  m.def("uniform_", in_place(+[](Tensor& t, double a, double b, Generator* g) { init::uniform_(t, a, b, g); }),
        tensor, py::arg("a") = 0.0, py::arg("b") = 1.0, gen);
  m.def("normal_", in_place(+[](Tensor& t, double mean, double std, Generator* g) {
    init::normal_(t, mean, std, g);
  }), tensor, py::arg("mean") = 0.0, py::arg("std") = 1.0, gen);
  m.def("trunc_normal_", in_place(+[](Tensor& t, double mean, double std, double a, double b, Generator* g) {
    init::trunc_normal_(t, mean, std, a, b, g);
  }), tensor, py::arg("mean") = 0.0, py::arg("std") = 1.0, py::arg("a") = -2.0, py::arg("b") = 2.0, gen);
  m.def("constant_", in_place(+[](Tensor& t, double v) { init::constant_(t, v); }), tensor, py::arg("val"));
  m.def("zeros_", in_place(+[](Tensor& t) { init::zeros_(t); }), tensor);
  m.def("ones_", in_place(+[](Tensor& t) { init::ones_(t); }), tensor);
  m.def("kaiming_uniform_", in_place(+[](Tensor& t, double a, std::string mode, std::string nl, Generator* g) {
    init::kaiming_uniform_(t, a, fan_mode(mode), nl, g);
  }), tensor, py::arg("a") = 0.0, py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu", gen);
  m.def("kaiming_normal_", in_place(+[](Tensor& t, double a, std::string mode, std::string nl, Generator* g) {
    init::kaiming_normal_(t, a, fan_mode(mode), nl, g);
  }), tensor, py::arg("a") = 0.0, py::arg("mode") = "fan_in", py::arg("nonlinearity") = "leaky_relu", gen);
  m.def("xavier_uniform_", in_place(+[](Tensor& t, double gain, Generator* g) { init::xavier_uniform_(t, gain, g); }),
        tensor, py::arg("gain") = 1.0, gen);
  m.def("calculate_gain", &init::calculate_gain, py::arg("nonlinearity"), py::arg("param") = 0.01);
}

void bind_models(py::module_& models) {
  models.def("make", [](const std::string& name, int64_t num_classes, Generator* gen, bool aux_logits,
                        double dropout) {
    RF_CHECK(num_classes >= 0, "models.make: num_classes ", num_classes, " is negative (0: the model's default)");
    return models::make_model(name, num_classes, {gen, aux_logits, dropout});
  }, py::arg("name"), py::arg("num_classes") = 0, py::arg("generator") = py::none(),
     py::arg("aux_logits") = true, py::arg("dropout") = 0.5, release_gil(),
     "A freshly initialised model of the registry (models.names()); num_classes 0: its default. "
     "A generator given is used for dropout too, so it must outlive the model.");
  models.def("names", &models::model_names);
  models.def("input_shape", &models::model_input_shape, py::arg("name"),
             "(C, H, W) of the images the model is made for.");
}

}  // namespace

nn::ModulePtr hold_module(const py::handle& module, const char* what) {
  if (!py::isinstance<nn::Module>(module))
    throw py::type_error(std::string(what) + ": expected a ringflow.nn.Module, got " +
                         py::type::of(module).attr("__name__").cast<std::string>());
  auto held = module.cast<nn::ModulePtr>();
  if (!dynamic_cast<PyModule*>(held.get())) return held;
  // The Python object owns the module; the pointer owns a reference to the Python object.
  return nn::ModulePtr(held.get(), [keep = release_with_gil(py::reinterpret_borrow<py::object>(module))](
                                       nn::Module*) { keep(); });
}

void bind_nn(py::module_& nn, py::module_& models) {
  bind_module(nn);
  bind_layers(nn);
  bind_containers_and_pools(nn);
  bind_losses(nn);
  bind_init(nn);
  bind_models(models);
}

}  // namespace ringflow::python
