// Grad mode and autocast as context managers (and no_grad as a decorator), as PyTorch's:
// `with ringflow.no_grad():`, `with ringflow.autocast("cpu", dtype=ringflow.bfloat16):`.
// Both are per thread, as the C++ guards they hold.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/autocast.h"
#include "ringflow/framework/autograd.h"

namespace ringflow::python {
namespace {

// `with ringflow.no_grad():` and `@ringflow.no_grad()`. A stack, so that one object may be
// entered again inside itself.
template <class Guard>
struct GuardScope {
  std::vector<std::unique_ptr<Guard>> active;
};

template <class Guard>
void bind_guard(py::module_& m, const char* name, const char* doc) {
  using Scope = GuardScope<Guard>;
  py::class_<Scope>(m, name, doc)
      .def(py::init<>())
      .def("__enter__", [](Scope& s) { s.active.push_back(std::make_unique<Guard>()); })
      .def("__exit__", [](Scope& s, const py::args&) {
        s.active.pop_back();
        return false;
      })
      .def("__call__", [](Scope&, py::function fn) {
        return py::cpp_function([fn](const py::args& args, const py::kwargs& kwargs) {
          Guard guard;
          return fn(*args, **kwargs);
        });
      });
}

struct Autocast {
  DType dtype;
  bool enabled;
  std::vector<std::unique_ptr<AutocastGuard>> active;
};

void bind_autocast(py::module_& m) {
  py::class_<Autocast>(m, "autocast",
                       "Mixed precision for the ops inside (torch.autocast): convolutions, linear "
                       "layers and matmuls in dtype (bfloat16 by default on the cpu, float16 on "
                       "cuda), reductions and losses in float32.")
      .def(py::init([](const std::string& device_type, std::optional<DType> dtype, bool enabled) {
             constexpr DeviceType kTypes[] = {DeviceType::cpu, DeviceType::cuda};
             const DeviceType type = from_name("autocast: device_type", device_type, kTypes,
                                               +[](DeviceType t) { return t == DeviceType::cpu ? "cpu" : "cuda"; });
             const DType d = dtype.value_or(type == DeviceType::cpu ? DType::bf16 : DType::f16);
             if (d != DType::bf16 && d != DType::f16)
               throw py::value_error("autocast: dtype " + py::repr(py::cast(d)).cast<std::string>() +
                                     " (choices: ringflow.float16, ringflow.bfloat16)");
             return Autocast{d, enabled, {}};
           }),
           py::arg("device_type") = "cpu", py::arg("dtype") = py::none(), py::arg("enabled") = true)
      .def("__enter__", [](Autocast& a) {
        a.active.push_back(std::make_unique<AutocastGuard>(a.dtype, a.enabled));
      })
      .def("__exit__", [](Autocast& a, const py::args&) {
        a.active.pop_back();
        return false;
      });
  m.def("is_autocast_enabled", &autocast_enabled);
}

}  // namespace

void bind_modes(py::module_& m) {
  bind_guard<NoGradGuard>(m, "no_grad", "Turns autograd's recording off inside (torch.no_grad).");
  m.def("is_grad_enabled", &grad_mode_enabled);
  bind_autocast(m);
}

}  // namespace ringflow::python
