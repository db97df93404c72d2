// The differentiable ops (framework/ops.h) under PyTorch's names: each as ringflow.NAME(input,
// ...) and as the method Tensor.NAME(...), the operators (+ - * / @ ** == < ...), and the
// layer functions in ringflow.nn.functional. Every op releases the GIL while it runs.
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/ops.h"

namespace ringflow::python {
namespace {

// Defines fn as ringflow.NAME(input, ...) and as Tensor.NAME(...); `args` name the arguments
// after the input.
template <class Fn, class... Args>
void def_op(py::module_& m, py::class_<Tensor>& c, const char* name, Fn fn, const Args&... args) {
  m.def(name, fn, py::arg("input"), args..., release_gil());
  c.def(name, fn, args..., release_gil());
}

}  // namespace

Reduction reduction_named(const std::string& name) {
  constexpr Reduction kReductions[] = {Reduction::mean, Reduction::sum, Reduction::none};
  return from_name("reduction", name, kReductions, +[](Reduction r) -> const char* {
    return r == Reduction::mean ? "mean" : r == Reduction::sum ? "sum" : "none";
  });
}

namespace {

Tensor scalar_like(const Tensor& t, double v) { return scalar_tensor(v, t.dtype(), t.device()); }

// where's condition: a Tensor (nonzero is true), anything as_tensor takes, or a bool array
// (NumPy's comparisons give one; ringflow has no bool dtype), whose True and False become 1
// and 0 in the input's dtype on its device. Called with the GIL held.
Tensor condition_for(const py::handle& condition, const Tensor& input) {
  if (py::isinstance<Tensor>(condition)) return condition.cast<Tensor>();
  if (!PyObject_CheckBuffer(condition.ptr())) return as_tensor(condition).to(input.device());
  Py_buffer view;
  if (PyObject_GetBuffer(condition.ptr(), &view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) throw py::error_already_set();
  const std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release(&view, PyBuffer_Release);
  if (!view.format || std::string(view.format) != "?") return as_tensor(condition).to(input.device());
  std::vector<uint8_t> bytes(static_cast<size_t>(view.len));  // one per item
  if (PyBuffer_ToContiguous(bytes.data(), &view, view.len, 'C') != 0) throw py::error_already_set();
  Tensor mask = empty(Shape(view.shape, view.shape + view.ndim), DType::f32);
  std::transform(bytes.begin(), bytes.end(), mask.data<float>(), [](uint8_t b) { return b ? 1.f : 0.f; });
  return mask.to(input.dtype()).to(input.device());
}

using Binary = Tensor (*)(const Tensor&, const Tensor&);
using WithScalar = Tensor (*)(const Tensor&, double);

void bind_arithmetic(py::module_& m, py::class_<Tensor>& c) {
  def_op(m, c, "add", Binary(&add), py::arg("other"));
  def_op(m, c, "add", WithScalar(&add), py::arg("other"));
  def_op(m, c, "sub", Binary(&sub), py::arg("other"));
  def_op(m, c, "sub", WithScalar(&sub), py::arg("other"));
  def_op(m, c, "mul", Binary(&mul), py::arg("other"));
  def_op(m, c, "mul", WithScalar(&mul), py::arg("other"));
  def_op(m, c, "div", Binary(&div), py::arg("other"));
  def_op(m, c, "div", WithScalar(&div), py::arg("other"));
  def_op(m, c, "pow", Binary(&pow), py::arg("exponent"));
  def_op(m, c, "pow", WithScalar(&pow), py::arg("exponent"));
  def_op(m, c, "maximum", &maximum, py::arg("other"));
  def_op(m, c, "minimum", &minimum, py::arg("other"));
  for (auto [name, fn] : {std::pair{"neg", &neg}, std::pair{"exp", &exp}, std::pair{"log", &log},
                          std::pair{"sqrt", &sqrt}, std::pair{"abs", &abs}, std::pair{"relu", &relu},
                          std::pair{"sigmoid", &sigmoid}, std::pair{"tanh", &tanh}}) {
    def_op(m, c, name, fn);
  }
  for (auto [name, fn] : {std::pair{"eq", &eq}, std::pair{"ne", &ne}, std::pair{"lt", &lt},
                          std::pair{"le", &le}, std::pair{"gt", &gt}, std::pair{"ge", &ge}}) {
    def_op(m, c, name, fn, py::arg("other"));
    def_op(m, c, name, [fn = fn](const Tensor& a, double b) { return fn(a, scalar_like(a, b)); },
           py::arg("other"));
  }
  m.def("where", [](const py::object& condition, const Tensor& input, const Tensor& other) {
    const Tensor cond = condition_for(condition, input);
    py::gil_scoped_release released;
    return where(cond, input, other);
  }, py::arg("condition"), py::arg("input"), py::arg("other"),
     "input where condition is true, else other, broadcast together (torch.where). condition: a\n"
     "Tensor (nonzero is true: ringflow's comparisons give 1 and 0 in their operands' dtype), a\n"
     "NumPy bool array such as a comparison's result, or anything ringflow.as_tensor takes.\n"
     "Differentiable in input and other. A condition whose shape does not broadcast with\n"
     "theirs is a ValueError.");
}

// The operators; a Python number on either side is a 0-d tensor of the other's dtype.
void bind_operators(py::class_<Tensor>& c) {
  const auto op = [&c](const char* name, auto fn) { c.def(name, fn, py::is_operator(), release_gil()); };
  op("__add__", Binary(&add));
  op("__add__", WithScalar(&add));
  op("__radd__", WithScalar(&add));
  op("__sub__", Binary(&sub));
  op("__sub__", WithScalar(&sub));
  op("__rsub__", [](const Tensor& a, double b) { return b - a; });
  op("__mul__", Binary(&mul));
  op("__mul__", WithScalar(&mul));
  op("__rmul__", WithScalar(&mul));
  op("__truediv__", Binary(&div));
  op("__truediv__", WithScalar(&div));
  op("__rtruediv__", [](const Tensor& a, double b) { return b / a; });
  op("__pow__", Binary(&pow));
  op("__pow__", WithScalar(&pow));
  op("__matmul__", &matmul);
  op("__neg__", &neg);
  op("__abs__", &abs);
  for (auto [name, fn] : {std::pair{"__eq__", &eq}, std::pair{"__ne__", &ne}, std::pair{"__lt__", &lt},
                          std::pair{"__le__", &le}, std::pair{"__gt__", &gt}, std::pair{"__ge__", &ge}}) {
    op(name, fn);
    op(name, [fn = fn](const Tensor& a, double b) { return fn(a, scalar_like(a, b)); });
  }
}

void bind_reductions(py::module_& m, py::class_<Tensor>& c) {
  const auto reduction = [](Tensor (*fn)(const Tensor&, const Shape&, bool)) {
    return [fn](const Tensor& x, const DimArg& dim, bool keepdim) { return fn(x, dims_of(dim), keepdim); };
  };
  for (auto [name, fn] : {std::pair{"sum", &sum}, std::pair{"mean", &mean}, std::pair{"amax", &amax},
                          std::pair{"amin", &amin}}) {
    def_op(m, c, name, reduction(fn), py::arg("dim") = py::none(), py::arg("keepdim") = false);
  }
  // var: PyTorch 2's correction, and 1.13's unbiased.
  def_op(m, c, "var", [](const Tensor& x, const DimArg& dim, std::optional<bool> unbiased,
                         bool keepdim, std::optional<int64_t> correction) {
    const int64_t corr = correction ? *correction : (unbiased.value_or(true) ? 1 : 0);
    return var(x, dims_of(dim), corr, keepdim);
  }, py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false,
     py::kw_only(), py::arg("correction") = py::none());
  // max(x): the largest value; max(x, dim): (values, indices), as torch.max.
  def_op(m, c, "max", [](const Tensor& x) { return max(x); });
  def_op(m, c, "max", [](const Tensor& x, int64_t dim, bool keepdim) {
    return std::make_tuple(max(x, dim, keepdim), argmax(x, dim, keepdim));
  }, py::arg("dim"), py::arg("keepdim") = false);
  def_op(m, c, "min", [](const Tensor& x) { return amin(x); });
  def_op(m, c, "argmax", [](const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
    if (dim) return argmax(x, *dim, keepdim);
    return argmax(x.reshape({-1}), 0, false);
  }, py::arg("dim") = py::none(), py::arg("keepdim") = false);
}

void bind_structure(py::module_& m, py::class_<Tensor>& c) {
  def_op(m, c, "matmul", &matmul, py::arg("other"));
  def_op(m, c, "mm", &matmul, py::arg("mat2"));
  def_op(m, c, "bmm", &matmul, py::arg("mat2"));
  def_op(m, c, "softmax", &softmax, py::arg("dim"));
  def_op(m, c, "log_softmax", &log_softmax, py::arg("dim"));
  def_op(m, c, "gather", &gather, py::arg("dim"), py::arg("index"));
  m.def("flatten", [](const Tensor& x, int64_t start, int64_t end) { return flatten(x, start, end); },
        py::arg("input"), py::arg("start_dim") = 0, py::arg("end_dim") = -1, release_gil());
  m.def("cat", static_cast<Tensor (*)(const std::vector<Tensor>&, int64_t)>(&cat), py::arg("tensors"), py::arg("dim") = 0, release_gil());
  m.def("broadcast_shapes", [](const py::args& shapes) {
    Shape out;
    for (const py::handle& s : shapes) out = broadcast_shapes(out, s.cast<Shape>());
    return py::tuple(py::cast(out));
  });
}

Pool2dParams pool_params(const IntOrPair& kernel, const std::optional<IntOrPair>& stride,
                         const IntOrPair& padding, bool ceil_mode, bool count_include_pad) {
  std::optional<std::array<int64_t, 2>> s;
  if (stride) s = pair_of(*stride, "stride");
  return pool2d_params(pair_of(kernel, "kernel_size"), s, pair_of(padding, "padding"), ceil_mode,
                       count_include_pad);
}

void bind_layers(py::module_& f) {
  f.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
    return linear(x, w, b.value_or(Tensor()));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), release_gil());
  f.def("conv2d", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, const IntOrPair& stride,
                     const IntOrPair& padding, const IntOrPair& dilation) {
    return conv2d(x, w, b.value_or(Tensor()),
                  conv2d_params(pair_of(stride, "stride"), pair_of(padding, "padding"),
                                pair_of(dilation, "dilation")));
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
     py::arg("padding") = 0, py::arg("dilation") = 1, release_gil());
  f.def("max_pool2d", [](const Tensor& x, const IntOrPair& kernel, std::optional<IntOrPair> stride,
                         const IntOrPair& padding, bool ceil_mode) {
    return max_pool2d(x, pool_params(kernel, stride, padding, ceil_mode, true));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
     py::arg("ceil_mode") = false, release_gil());
  f.def("avg_pool2d", [](const Tensor& x, const IntOrPair& kernel, std::optional<IntOrPair> stride,
                         const IntOrPair& padding, bool ceil_mode, bool count_include_pad) {
    return avg_pool2d(x, pool_params(kernel, stride, padding, ceil_mode, count_include_pad));
  }, py::arg("input"), py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0,
     py::arg("ceil_mode") = false, py::arg("count_include_pad") = true, release_gil());
  f.def("adaptive_avg_pool2d", [](const Tensor& x, const IntOrPair& size) {
    return adaptive_avg_pool2d(x, pair_of(size, "output_size"));
  }, py::arg("input"), py::arg("output_size"), release_gil());
  f.def("batch_norm", [](const Tensor& x, std::optional<Tensor> mean, std::optional<Tensor> var,
                         std::optional<Tensor> w, std::optional<Tensor> b, bool training,
                         double momentum, double eps) {
    return batch_norm(x, mean.value_or(Tensor()), var.value_or(Tensor()), w.value_or(Tensor()),
                      b.value_or(Tensor()), training, momentum, eps);
  }, py::arg("input"), py::arg("running_mean"), py::arg("running_var"), py::arg("weight") = py::none(),
     py::arg("bias") = py::none(), py::arg("training") = false, py::arg("momentum") = 0.1,
     py::arg("eps") = 1e-5, release_gil());
  f.def("dropout", [](const Tensor& x, double p, bool training, Generator* gen) {
    return dropout(x, p, training, gen);
  }, py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true,
     py::arg("generator") = py::none(), release_gil());
  for (auto [name, fn] : {std::pair{"relu", &relu}, std::pair{"sigmoid", &sigmoid}, std::pair{"tanh", &tanh}})
    f.def(name, fn, py::arg("input"), release_gil());
  f.def("softmax", &softmax, py::arg("input"), py::arg("dim"), release_gil());
  f.def("log_softmax", &log_softmax, py::arg("input"), py::arg("dim"), release_gil());
}

void bind_losses(py::module_& f) {
  f.def("cross_entropy", [](const Tensor& x, const Tensor& target, const std::string& reduction,
                            double label_smoothing) {
    return cross_entropy(x, target, reduction_named(reduction), label_smoothing);
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean",
     py::arg("label_smoothing") = 0.0, release_gil());
  f.def("nll_loss", [](const Tensor& x, const Tensor& target, const std::string& reduction) {
    return nll_loss(x, target, reduction_named(reduction));
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", release_gil());
  f.def("mse_loss", [](const Tensor& x, const Tensor& target, const std::string& reduction) {
    return mse_loss(x, target, reduction_named(reduction));
  }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", release_gil());
}

}  // namespace

void bind_ops(py::module_& m, py::module_& functional) {
  auto c = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  bind_arithmetic(m, c);
  bind_operators(c);
  bind_reductions(m, c);
  bind_structure(m, c);
  bind_layers(functional);
  bind_losses(functional);
}

}  // namespace ringflow::python
