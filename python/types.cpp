// What describes a tensor (ringflow.dtype, ringflow.device), the random generators, the
// CPU threads and what the process sees of CUDA: PyTorch's names throughout.
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/ops.h"
#include "ringflow/framework/random.h"
#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::python {

Shape shape_from_args(const py::args& args) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return args[0].cast<Shape>();
  return args.cast<Shape>();
}

std::array<int64_t, 2> pair_of(const IntOrPair& value, const char* what) {
  if (const auto* v = std::get_if<int64_t>(&value)) return {*v, *v};
  const auto& v = std::get<std::vector<int64_t>>(value);
  RF_CHECK(v.size() == 2, what, ": an int or a pair of ints, got ", v.size(), " ints");
  return {v[0], v[1]};
}

Shape dims_of(const DimArg& dim) {
  if (!dim) return {};
  if (const auto* d = std::get_if<int64_t>(&*dim)) return {*d};
  return std::get<std::vector<int64_t>>(*dim);
}

namespace {

const char* const kDtypeNames[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64"};

std::string dtype_repr(DType d) { return std::string("ringflow.") + kDtypeNames[static_cast<int>(d)]; }

void bind_dtype(py::module_& m) {
  py::enum_<DType> dtype(m, "dtype");
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64})
    dtype.value(kDtypeNames[static_cast<int>(d)], d);
  dtype.export_values()
      .def_property_readonly("is_floating_point", &is_floating)
      .def_property_readonly("itemsize", &dtype_size);
  // py::enum_'s own __repr__ and __str__ would come first among overloads: replaced.
  dtype.attr("__repr__") = py::cpp_function(&dtype_repr, py::is_method(dtype));
  dtype.attr("__str__") = py::cpp_function(&dtype_repr, py::is_method(dtype));
  // PyTorch's other names for them.
  for (auto [alias, d] : {std::pair{"float", DType::f32}, std::pair{"double", DType::f64},
                          std::pair{"half", DType::f16}, std::pair{"int", DType::i32},
                          std::pair{"long", DType::i64}})
    m.attr(alias) = d;
}

void bind_device(py::module_& m) {
  py::class_<Device>(m, "device")
      .def(py::init(&Device::parse), py::arg("type"))
      .def(py::init([](const std::string& type, int index) {
             return Device::parse(type + ":" + std::to_string(index));
           }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; })
      .def_property_readonly("index", [](const Device& d) -> std::optional<int> {
        if (d.is_cpu()) return std::nullopt;
        return d.index;
      })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "device(type='" + d.str() + "')"; })
      .def(py::self == py::self)
      .def("__hash__", [](const Device& d) { return std::hash<std::string>()(d.str()); });
  py::implicitly_convertible<py::str, Device>();
}

void bind_random(py::module_& m) {
  py::class_<Generator>(m, "Generator")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def("manual_seed", [](Generator& g, uint64_t seed) -> Generator& {
        g.manual_seed(seed);
        return g;
      }, py::return_value_policy::reference_internal)
      .def("initial_seed", &Generator::seed);
  m.def("manual_seed", [](uint64_t seed) { manual_seed(seed); }, py::arg("seed"));
  m.def("default_generator", &default_generator, py::return_value_policy::reference);
}

// Bytes of tensor memory handed out now on a device (torch.cuda.memory_allocated's figure;
// for the cpu, ringflow's host allocator's).
size_t memory_allocated(const Device& d) {
  return d.is_cpu() ? cpu_allocator_stats().allocated : cuda_memory_stats(d.index).allocated;
}

void bind_threads_and_cuda(py::module_& m) {
  m.def("memory_allocated", &memory_allocated, py::arg("device") = Device::cpu());
  m.def("set_num_threads", &set_num_threads, py::arg("n"),
        "Threads for the CPU kernels (oneDNN/OpenMP and ringflow's own loops), for the process.");
  m.def("get_num_threads", &num_threads);
  py::module_ cuda = m.def_submodule("cuda", "What the process sees of CUDA.");
  cuda.def("device_count", [] { return cuda_device_count(); });
  cuda.def("is_available", [] { return cuda_device_count() > 0; });
  cuda.def("set_device", &set_cuda_device, py::arg("device"));
  cuda.def("synchronize", [](std::optional<Device> d) { synchronize(d.value_or(Device::cuda())); },
           py::arg("device") = py::none(), release_gil());
}

}  // namespace

void bind_types(py::module_& m) {
  bind_dtype(m);
  bind_device(m);
  bind_random(m);
  bind_threads_and_cuda(m);
}

}  // namespace ringflow::python
