// The `ringflow` Python module (pybind11) over ringflow's installed C++ API: one file per area,
// each adding its names to the module or a submodule (module.cpp calls them in order; the
// tensor's types come first, as the others' signatures use them). Nothing below python/
// knows it exists.
//
// Threading: every call that runs kernels, collectives or data loading releases the GIL
// (release_gil); C++ code that calls back into Python (a Module subclass's forward) takes it
// again. C++ exceptions reach Python with their messages: std::invalid_argument as
// ValueError, std::out_of_range as IndexError, other std::exception as RuntimeError.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/ops.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::python {

namespace py = pybind11;

using release_gil = py::call_guard<py::gil_scoped_release>;

// nn.Parameter: a Tensor that Module.__setattr__ registers as a parameter (a leaf that
// requires grad) rather than keeping as a plain attribute.
struct Parameter : Tensor {
  using Tensor::Tensor;
  explicit Parameter(const Tensor& t) : Tensor(t) {}
};

void bind_types(py::module_& m);                           // types.cpp
void bind_modes(py::module_& m);                           // modes.cpp
void bind_tensor(py::module_& m);                          // tensor.cpp
void bind_creation(py::module_& m);                        // creation.cpp
void bind_ops(py::module_& m, py::module_& functional);    // ops.cpp
void bind_interop(py::module_& m);                         // interop.cpp
void bind_nn(py::module_& nn, py::module_& models);        // nn.cpp
void bind_optim(py::module_& optim, py::module_& nn_utils);  // optim.cpp
void bind_data(py::module_& data);                         // data.cpp
void bind_distributed(py::module_& distributed);           // distributed.cpp
void bind_serialize(py::module_& m);                       // serialize.cpp

// fn(tensor, args...) as a Python function that updates the tensor in place with the GIL
// released and returns the same Python object, as PyTorch's in-place functions do.
template <class... Args>
auto in_place(void (*fn)(Tensor&, Args...)) {
  return [fn](py::object self, Args... args) {
    Tensor& t = self.cast<Tensor&>();
    {
      py::gil_scoped_release release;
      fn(t, args...);
    }
    return self;
  };
}

// The value of `values` that the library's `name` calls `text`: the Python API takes names,
// as PyTorch's does (comm_hook="fp16"), and turns them into the library's enums here. Throws
// std::invalid_argument (ValueError) naming the argument and the choices.
template <class E, size_t N>
E from_name(const char* argument, const std::string& text, const E (&values)[N], const char* (*name)(E)) {
  std::string choices;
  for (E v : values) {
    if (text == name(v)) return v;
    choices += (choices.empty() ? "" : ", ") + std::string(name(v));
  }
  throw std::invalid_argument(std::string(argument) + " '" + text + "' (choices: " + choices + ")");
}

// A loss's reduction= as PyTorch names it: "mean", "sum" or "none" (ops.cpp); throws
// std::invalid_argument (ValueError) naming the choices.
Reduction reduction_named(const std::string& name);

// A shape as Python gives one: f(2, 3) or f((2, 3)) or f([2, 3]).
Shape shape_from_args(const py::args& args);
// An int or a pair of ints, as PyTorch's layers take a kernel size, stride or padding.
using IntOrPair = std::variant<int64_t, std::vector<int64_t>>;
std::array<int64_t, 2> pair_of(const IntOrPair& value, const char* what);
// Dims as reductions take them: None (all), an int or a sequence of ints.
using DimArg = std::optional<std::variant<int64_t, std::vector<int64_t>>>;
Shape dims_of(const DimArg& dim);

// A ringflow tensor over obj without a copy where one can be had: a ringflow Tensor as it is,
// an object with __dlpack__ (torch, NumPy) through DLPack, anything else with the buffer
// protocol through it; else a copy of its values (Python lists and numbers).
Tensor as_tensor(const py::handle& obj);

// A C++ owner of a Python-made module: a Module subclass written in Python lives in its Python
// object, which the returned pointer keeps alive (a plain holder would let Python free it
// while C++ still calls its forward). Anything but a Module is a TypeError naming `what`.
nn::ModulePtr hold_module(const py::handle& module, const char* what);

// Keeps `owner` alive until the returned function runs (or its last copy is gone), then lets
// go of it with the GIL held, from whatever thread: a Storage's release for memory that a
// Python object owns, which the last tensor may drop on a worker thread. After the
// interpreter has begun to finalize, the reference is left (it can no longer be dropped).
std::function<void()> release_with_gil(py::object owner);

}  // namespace ringflow::python
