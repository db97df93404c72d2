// Tensors made from nothing, as torch's factories: zeros, ones, empty, full, the *_like
// forms, arange, rand and randn. Sizes come as ints or one sequence: zeros(2, 3), zeros((2, 3)).
#include <pybind11/stl.h>

#include <optional>
#include <utility>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/ops.h"

namespace ringflow::python {
namespace {

Tensor with_grad(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

template <Tensor (*make)(const Shape&, DType, Device)>
void def_sized(py::module_& m, const char* name) {
  m.def(name, [](const py::args& size, DType dtype, Device device, bool requires_grad) {
    const Shape shape = shape_from_args(size);
    py::gil_scoped_release release;
    return with_grad(make(shape, dtype, device), requires_grad);
  }, py::arg("dtype") = DType::f32, py::arg("device") = Device::cpu(), py::arg("requires_grad") = false);
}

}  // namespace

void bind_creation(py::module_& m) {
  def_sized<&empty>(m, "empty");
  def_sized<&zeros>(m, "zeros");
  def_sized<&ones>(m, "ones");
  m.def("full", [](const Shape& size, double value, DType dtype, Device device, bool requires_grad) {
    return with_grad(full(size, value, dtype, device), requires_grad);
  }, py::arg("size"), py::arg("fill_value"), py::arg("dtype") = DType::f32,
     py::arg("device") = Device::cpu(), py::arg("requires_grad") = false, release_gil());
  for (auto [name, fn] : {std::pair{"empty_like", &empty_like}, std::pair{"zeros_like", &zeros_like},
                          std::pair{"ones_like", &ones_like}}) {
    m.def(name, fn, py::arg("input"), release_gil());
  }
  m.def("full_like", [](const Tensor& t, double value) { return empty_like(t).fill_(value); },
        py::arg("input"), py::arg("fill_value"), release_gil());
  // arange(end), arange(start, end, step): int64 when every bound is an int (PyTorch's rule).
  m.def("arange", [](const py::object& start, const py::object& end, const py::object& step,
                     std::optional<DType> dtype, Device device, bool requires_grad) {
    const bool ints = py::isinstance<py::int_>(start) && (end.is_none() || py::isinstance<py::int_>(end)) &&
                      py::isinstance<py::int_>(step);
    double lo = start.cast<double>(), hi = 0;
    if (end.is_none()) std::swap(lo, hi);
    else hi = end.cast<double>();
    const double by = step.cast<double>();
    py::gil_scoped_release release;
    return with_grad(arange(lo, hi, by, dtype.value_or(ints ? DType::i64 : DType::f32), device),
                     requires_grad);
  }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1, py::kw_only(),
     py::arg("dtype") = py::none(), py::arg("device") = Device::cpu(), py::arg("requires_grad") = false);
  for (auto [name, fn] : {std::pair{"rand", &ringflow::rand}, std::pair{"randn", &ringflow::randn}}) {
    m.def(name, [fn = fn](const py::args& size, Generator* gen, DType dtype, bool requires_grad) {
      const Shape shape = shape_from_args(size);
      py::gil_scoped_release release;
      return with_grad(fn(shape, gen, dtype, 0.0, 1.0), requires_grad);
    }, py::arg("generator") = py::none(), py::arg("dtype") = DType::f32,
       py::arg("requires_grad") = false);
  }
}

}  // namespace ringflow::python
