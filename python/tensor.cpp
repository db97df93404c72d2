// ringflow.Tensor: a Python handle to a C++ Tensor (itself a handle to shared storage), with
// torch.Tensor's names for its metadata, views, conversions, autograd state, in-place
// updates, indexing and printing. The ops are methods too (ops.cpp); NumPy and DLPack
// exchange lives in interop.cpp.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::python {
namespace {

py::tuple to_tuple(const Shape& s) { return py::tuple(py::cast(s)); }

// x.to(dtype), x.to(device), x.to(device, dtype), x.to(other), keywords dtype= and device=.
Tensor convert(const Tensor& t, const py::args& args, const py::kwargs& kwargs) {
  std::optional<DType> dtype;
  std::optional<Device> device;
  for (const py::handle& a : args) {
    if (py::isinstance<DType>(a)) {
      dtype = a.cast<DType>();
    } else if (py::isinstance<Tensor>(a)) {
      dtype = a.cast<const Tensor&>().dtype();
      device = a.cast<const Tensor&>().device();
    } else {
      device = a.cast<Device>();  // a device or its name
    }
  }
  if (kwargs.contains("dtype")) dtype = kwargs["dtype"].cast<DType>();
  if (kwargs.contains("device")) device = kwargs["device"].cast<Device>();
  py::gil_scoped_release release;
  Tensor out = t;
  if (device) out = out.to(*device);
  if (dtype) out = out.to(*dtype);
  return out;
}

// Nested lists of the values, as tolist().
py::object to_list(const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).contiguous();
  const bool integral = !is_floating(t.dtype());
  const std::vector<double> values = host.to(DType::f64).to_vector<double>();
  const Shape& shape = t.shape();
  std::function<py::object(size_t, size_t)> level = [&](size_t d, size_t base) -> py::object {
    if (d == shape.size()) {
      return integral ? py::object(py::int_(static_cast<int64_t>(values[base])))
                      : py::object(py::float_(values[base]));
    }
    py::list out;
    const size_t inner = static_cast<size_t>(shape_numel(Shape(shape.begin() + d + 1, shape.end())));
    for (int64_t i = 0; i < shape[d]; ++i) out.append(level(d + 1, base + static_cast<size_t>(i) * inner));
    return out;
  };
  return level(0, 0);
}

py::object item(const Tensor& t) {
  const double v = [&] {
    py::gil_scoped_release release;
    return t.item();
  }();
  if (is_floating(t.dtype())) return py::float_(v);
  return py::int_(static_cast<int64_t>(v));
}

// Basic indexing as NumPy's and PyTorch's: ints, slices (positive steps), None and one
// Ellipsis, alone or in a tuple. Every result is a view.
Tensor index(const Tensor& t, const py::handle& key) {
  const py::tuple items = py::isinstance<py::tuple>(key) ? py::reinterpret_borrow<py::tuple>(key)
                                                         : py::make_tuple(key);
  int64_t consumed = 0;  // dims the items address
  for (const py::handle& item : items)
    if (!item.is_none() && !item.is(py::ellipsis())) ++consumed;
  if (consumed > t.dim())
    throw py::index_error("too many indices for a tensor of dimension " + std::to_string(t.dim()));
  Tensor out = t;
  int64_t d = 0;
  for (const py::handle& item : items) {
    if (item.is_none()) {
      out = out.unsqueeze(d++);
    } else if (item.is(py::ellipsis())) {
      d += t.dim() - consumed;
    } else if (py::isinstance<py::slice>(item)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(item.ptr(), &start, &stop, &step) < 0) throw py::error_already_set();
      const int64_t n = out.size(d);
      PySlice_AdjustIndices(n, &start, &stop, step);
      if (step <= 0) throw py::value_error("step must be greater than zero");
      out = out.slice(d++, start, std::max(start, stop), step);
    } else if (py::isinstance<py::int_>(item) || PyIndex_Check(item.ptr())) {
      const auto i = item.cast<int64_t>();
      const int64_t n = out.size(d);
      if (i < -n || i >= n)
        throw py::index_error("index " + std::to_string(i) + " is out of bounds for dimension " +
                              std::to_string(d) + " with size " + std::to_string(n));
      out = out.select(d, i < 0 ? i + n : i);
    } else {
      throw py::type_error("ringflow tensors are indexed by ints, slices, None and ...; got " +
                           py::repr(item).cast<std::string>() + " (gather() takes index tensors)");
    }
  }
  return out;
}

void assign(const Tensor& t, const py::handle& key, const py::object& value) {
  Tensor view = index(t, key);
  if (py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value)) {
    const auto v = value.cast<double>();
    py::gil_scoped_release release;
    view.fill_(v);
    return;
  }
  const Tensor src = as_tensor(value);
  py::gil_scoped_release release;
  view.copy_(src);
}

Tensor squeeze(const Tensor& t, std::optional<int64_t> dim) {
  if (dim) return t.size(*dim) == 1 ? t.squeeze(*dim) : t;
  Shape kept;
  for (int64_t s : t.shape())
    if (s != 1) kept.push_back(s);
  return t.reshape(kept);
}

void bind_metadata(py::class_<Tensor>& c) {
  c.def_property_readonly("shape", [](const Tensor& t) { return to_tuple(t.shape()); })
      .def("size", [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
        if (dim) return py::int_(t.size(*dim));
        return to_tuple(t.shape());
      }, py::arg("dim") = py::none())
      .def("stride", [](const Tensor& t, std::optional<int64_t> dim) -> py::object {
        if (dim) return py::int_(t.strides()[static_cast<size_t>(wrap_dim(*dim, t.dim()))]);
        return to_tuple(t.strides());
      }, py::arg("dim") = py::none())
      .def("dim", &Tensor::dim)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("device", &Tensor::device)
      .def_property_readonly("is_cuda", [](const Tensor& t) { return t.device().is_cuda(); })
      .def("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("element_size", [](const Tensor& t) { return dtype_size(t.dtype()); })
      .def_property_readonly("nbytes", [](const Tensor& t) { return t.numel() * dtype_size(t.dtype()); })
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def("storage_offset", &Tensor::offset)
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__repr__", [](const Tensor& t) {
        py::gil_scoped_release release;
        return t.str();
      });
}

void bind_views(py::class_<Tensor>& c) {
  c.def("view", [](const Tensor& t, const py::args& shape) { return t.view(shape_from_args(shape)); })
      .def("reshape", [](const Tensor& t, const py::args& shape) {
        return t.reshape(shape_from_args(shape));
      })
      .def("permute", [](const Tensor& t, const py::args& dims) { return t.permute(shape_from_args(dims)); })
      .def("expand", [](const Tensor& t, const py::args& shape) { return t.expand(shape_from_args(shape)); })
      .def("transpose", &Tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("t", &Tensor::t)
      .def_property_readonly("T", &Tensor::t)
      .def("narrow", &Tensor::narrow, py::arg("dim"), py::arg("start"), py::arg("length"))
      .def("select", &Tensor::select, py::arg("dim"), py::arg("index"))
      .def("squeeze", &squeeze, py::arg("dim") = py::none())
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("dim"))
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("__getitem__", &index)
      .def("__setitem__", &assign);
}

void bind_conversions(py::class_<Tensor>& c) {
  c.def("contiguous", &Tensor::contiguous, release_gil())
      .def("clone", &Tensor::clone, release_gil())
      .def("to", &convert)
      .def("cpu", [](const Tensor& t) { return t.to(Device::cpu()); }, release_gil())
      .def("cuda", [](const Tensor& t, std::optional<int> index) {
        return t.to(Device::cuda(index.value_or(0)));
      }, py::arg("device") = py::none(), release_gil())
      .def("item", &item)
      .def("tolist", &to_list)
      .def("__float__", [](const Tensor& t) { return t.item(); }, release_gil())
      .def("__int__", [](const Tensor& t) { return static_cast<int64_t>(t.item()); }, release_gil())
      .def("__bool__", [](const Tensor& t) { return t.item() != 0; }, release_gil());
  for (auto [name, dtype] : {std::pair{"float", DType::f32}, std::pair{"double", DType::f64},
                             std::pair{"half", DType::f16}, std::pair{"bfloat16", DType::bf16},
                             std::pair{"int", DType::i32}, std::pair{"long", DType::i64}}) {
    c.def(name, [dtype = dtype](const Tensor& t) { return t.to(dtype); }, release_gil());
  }
}

void bind_autograd(py::class_<Tensor>& c) {
  c.def_property("requires_grad", &Tensor::requires_grad,
                 [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def("requires_grad_", [](py::object self, bool on) {
        self.cast<Tensor&>().requires_grad_(on);
        return self;
      }, py::arg("requires_grad") = true)
      .def_property("grad", [](const Tensor& t) -> std::optional<Tensor> {
        Tensor g = t.grad();
        if (!g.defined()) return std::nullopt;
        return g;
      }, [](const Tensor& t, std::optional<Tensor> g) { t.set_grad(g.value_or(Tensor())); })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn", [](const Tensor& t) -> std::optional<std::string> {
        if (!t.grad_fn()) return std::nullopt;
        return t.grad_fn()->name();
      })
      .def("backward", [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
        t.backward(gradient.value_or(Tensor()), retain_graph);
      }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false, release_gil())
      .def("detach", &Tensor::detach)
      .def("zero_", in_place(+[](Tensor& t) { t.zero_(); }))
      .def("fill_", in_place(+[](Tensor& t, double v) { t.fill_(v); }), py::arg("value"))
      .def("mul_", in_place(+[](Tensor& t, double v) { t.mul_(v); }), py::arg("other"))
      .def("add_", in_place(+[](Tensor& t, const Tensor& o, double alpha) { t.add_(o, alpha); }),
           py::arg("other"), py::arg("alpha") = 1.0)
      .def("sub_", in_place(+[](Tensor& t, const Tensor& o, double alpha) { t.add_(o, -alpha); }),
           py::arg("other"), py::arg("alpha") = 1.0)
      .def("copy_", in_place(+[](Tensor& t, const Tensor& src) { t.copy_(src); }), py::arg("src"));
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<Tensor> c(m, "Tensor", py::buffer_protocol(),
                       "A handle to shared storage with a shape, strides, a dtype and a device, "
                       "and autograd state (requires_grad, grad, grad_fn).");
  bind_metadata(c);
  bind_views(c);
  bind_conversions(c);
  bind_autograd(c);
  // Elementwise == makes a tensor, so hashing is by identity, as PyTorch's.
  c.attr("__hash__") = py::module_::import("builtins").attr("object").attr("__hash__");
}

}  // namespace ringflow::python
