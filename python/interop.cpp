// Tensors shared with NumPy and PyTorch without copies. In: from_numpy (anything with the
// buffer protocol, held through it until the last tensor over it is gone) and from_dlpack
// (DLPack capsules from torch, NumPy, CuPy, JAX...). Out: Tensor.numpy() and __array__ (an
// ndarray whose base is the tensor), and __dlpack__ / __dlpack_device__ (for
// torch.from_dlpack and np.from_dlpack). Memory crossing either way is marked shared, so
// that kernels keep nothing derived from it that a write from the other side would outdate.
// ringflow.tensor() copies, as torch.tensor does.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/ops.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::python {

namespace {

bool interpreter_running() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

}  // namespace

std::function<void()> release_with_gil(py::object owner) {
  // Shared between the function's copies: whichever lets go first drops the reference.
  class Held {
   public:
    explicit Held(py::object o) : owner_(new py::object(std::move(o))) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() { drop(); }
    void drop() noexcept {
      if (!owner_) return;
      if (interpreter_running()) {
        py::gil_scoped_acquire gil;
        delete owner_;
      }
      owner_ = nullptr;
    }

   private:
    py::object* owner_;
  };
  auto held = std::make_shared<Held>(std::move(owner));
  return [held] { held->drop(); };
}

namespace {

// --- the buffer protocol (NumPy arrays, memoryviews, array.array)

// A struct-module format and item size as a ringflow dtype; nullopt where there is none.
std::optional<DType> dtype_of_format(std::string format, size_t itemsize) {
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) format.erase(0, 1);
  if (format.size() != 1) return std::nullopt;
  switch (format[0]) {
    case 'f': return DType::f32;
    case 'd': return DType::f64;
    case 'e': return DType::f16;
    case 'i': case 'l': case 'q':
      if (itemsize == 4) return DType::i32;
      if (itemsize == 8) return DType::i64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// What NumPy calls the object's dtype, for messages ("uint8"), else its buffer format.
std::string describe_dtype(const py::handle& obj, const std::string& format) {
  if (py::hasattr(obj, "dtype")) return "dtype " + py::str(obj.attr("dtype")).cast<std::string>();
  return "format '" + format + "'";
}

Tensor from_buffer(const py::handle& obj) {
  auto view = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(obj.ptr(), view.get(), PyBUF_STRIDES | PyBUF_FORMAT) != 0)
    throw py::error_already_set();
  // The capsule releases the buffer when the last tensor over it is gone.
  py::capsule owner(view.get(), [](void* p) {
    auto* v = static_cast<Py_buffer*>(p);
    PyBuffer_Release(v);
    delete v;
  });
  const Py_buffer& v = *view.release();
  const std::string format = v.format ? v.format : "B";
  const std::optional<DType> dtype = dtype_of_format(format, static_cast<size_t>(v.itemsize));
  if (!dtype)
    throw py::type_error("from_numpy: " + describe_dtype(obj, format) +
                         " has no ringflow dtype (float32, float64, float16, int32, int64); "
                         "convert it first, e.g. a.astype(numpy.float32)");
  Shape shape(v.shape, v.shape + v.ndim), strides(static_cast<size_t>(v.ndim));
  for (int d = 0; d < v.ndim; ++d) {
    if (v.strides[d] < 0 || v.strides[d] % v.itemsize != 0)
      throw py::value_error("from_numpy: strides (bytes) " + py::repr(py::cast(Shape(v.strides, v.strides + v.ndim))).cast<std::string>() +
                            " are negative or not whole items of " + std::to_string(v.itemsize) +
                            " bytes; copy it first, e.g. numpy.ascontiguousarray(a)");
    strides[static_cast<size_t>(d)] = v.strides[d] / v.itemsize;
  }
  return from_blob(v.buf, shape, strides, *dtype, Device::cpu(), release_with_gil(std::move(owner)));
}

const char* numpy_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::bf16: break;
  }
  throw py::type_error("numpy(): NumPy has no bfloat16; convert first, e.g. t.float().numpy()");
}

// An ndarray over the tensor's memory whose base is the tensor's Python object.
py::array to_numpy(const py::object& self) {
  const Tensor& t = self.cast<const Tensor&>();
  if (!t.device().is_cpu())
    throw py::type_error("numpy(): the tensor is on " + t.device().str() +
                         "; copy it to the cpu first, e.g. t.cpu().numpy()");
  if (t.requires_grad())
    throw std::runtime_error("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.");
  const auto itemsize = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(s * itemsize);
  t.storage()->mark_shared();
  return py::array(py::dtype(numpy_name(t.dtype())), shape, strides, t.raw_data(), self);
}

// --- DLPack

struct DlpackExport {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
  }
  return {kDLFloat, 32, 1};
}

std::optional<DType> dtype_of_dl(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const DLDataType c = dl_dtype(d);
    if (c.code == t.code && c.bits == t.bits) return d;
  }
  return std::nullopt;
}

// A capsule that no consumer took still owns its tensor (the DLPack protocol's rule).
void dlpack_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "used_dltensor")) return;
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m && m->deleter) m->deleter(m);
  if (!m) PyErr_WriteUnraisable(capsule);
  PyErr_Restore(type, value, trace);
}

// stream: the consumer's CUDA stream (None or 1: the legacy default one, where ringflow's
// kernels run, so already in order; -1: no ordering wanted; else we wait for our kernels).
py::capsule to_dlpack(const Tensor& t, std::optional<int64_t> stream) {
  if (t.requires_grad())
    throw std::runtime_error("Can't export tensors that require gradient, use tensor.detach()");
  if (t.device().is_cuda() && stream && *stream != 1 && *stream != -1) {
    py::gil_scoped_release release;
    synchronize(t.device());
  }
  auto e = std::make_unique<DlpackExport>();
  e->tensor = t;
  e->shape = t.shape();
  e->strides = t.strides();
  DLTensor& dl = e->managed.dl_tensor;
  dl.data = t.raw_data();
  dl.device = {t.device().is_cuda() ? kDLCUDA : kDLCPU, t.device().is_cuda() ? t.device().index : 0};
  dl.ndim = t.dim();
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = e->shape.data();
  dl.strides = e->strides.data();
  e->managed.manager_ctx = e.get();
  e->managed.deleter = [](DLManagedTensor* self) { delete static_cast<DlpackExport*>(self->manager_ctx); };
  t.storage()->mark_shared();
  PyObject* capsule = PyCapsule_New(&e->managed, "dltensor", dlpack_capsule_destructor);
  if (!capsule) throw py::error_already_set();
  e.release();
  return py::reinterpret_steal<py::capsule>(capsule);
}

Device device_of_dl(DLDevice d) {
  if (d.device_type == kDLCPU) return Device::cpu();
  if (d.device_type != kDLCUDA)
    throw py::type_error("from_dlpack: DLPack device type " + std::to_string(d.device_type) +
                         " (ringflow takes kDLCPU 1 and kDLCUDA 2)");
  std::string why;
  const int count = cuda_device_count(&why);
  if (d.device_id >= count)
    throw std::runtime_error("from_dlpack: the tensor is on cuda:" + std::to_string(d.device_id) +
                             ", but ringflow sees " + std::to_string(count) + " CUDA devices" +
                             (why.empty() ? "" : " (" + why + ")"));
  return Device::cuda(d.device_id);
}

// Takes the capsule's tensor (renaming the capsule "used_dltensor", as the protocol asks);
// its producer's deleter runs once no ringflow tensor uses the memory.
Tensor from_capsule(const py::capsule& capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw py::value_error("from_dlpack: a DLPack capsule may be consumed once (this one was, or is none)");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  const DLTensor& dl = m->dl_tensor;
  const std::optional<DType> dtype = dtype_of_dl(dl.dtype);
  if (!dtype)
    throw py::type_error("from_dlpack: DLPack dtype (code " + std::to_string(dl.dtype.code) + ", " +
                         std::to_string(dl.dtype.bits) + " bits, " + std::to_string(dl.dtype.lanes) +
                         " lanes) has no ringflow dtype (float32/64/16, bfloat16, int32/64)");
  const Device device = device_of_dl(dl.device);
  const Shape shape(dl.shape, dl.shape + dl.ndim);
  const Shape strides = dl.strides ? Shape(dl.strides, dl.strides + dl.ndim) : Shape{};
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  // Producers' deleters may need the GIL (NumPy's does): run it with the GIL held.
  auto release = [m] {
    if (!m->deleter) return;
    if (!interpreter_running()) return;
    py::gil_scoped_acquire acquire;
    m->deleter(m);
  };
  Tensor t = from_blob(data, shape, strides, *dtype, device, release);
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  return t;
}

Tensor from_dlpack(const py::object& obj) {
  if (py::isinstance<py::capsule>(obj)) return from_capsule(obj);
  if (!py::hasattr(obj, "__dlpack__"))
    throw py::type_error("from_dlpack: " + py::str(py::type::of(obj)).cast<std::string>() +
                         " has no __dlpack__ (and is no DLPack capsule)");
  const auto device = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
  // On CUDA the producer orders its work before the legacy default stream (1), ringflow's.
  py::object capsule = device.first == kDLCUDA ? obj.attr("__dlpack__")(py::arg("stream") = 1)
                                               : obj.attr("__dlpack__")();
  return from_capsule(capsule);
}

// --- copies of Python values

bool is_sequence(const py::handle& obj) { return py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj); }

// The shape of nested lists or tuples, read along their first items.
Shape nested_shape(py::handle obj) {
  Shape shape;
  while (is_sequence(obj)) {
    const auto seq = py::reinterpret_borrow<py::sequence>(obj);
    shape.push_back(static_cast<int64_t>(seq.size()));
    if (seq.size() == 0) break;
    obj = seq[0];
  }
  return shape;
}

// The numbers of nested lists or tuples of `shape`, row-major; ints: whether all were ints.
void collect(const py::handle& obj, size_t depth, const Shape& shape, std::vector<double>& values, bool& ints) {
  if (depth == shape.size()) {
    if (is_sequence(obj))
      throw py::value_error("tensor(): ragged nested sequence (a sequence where a number was expected)");
    ints = ints && (py::isinstance<py::int_>(obj) || py::isinstance<py::bool_>(obj));
    values.push_back(obj.cast<double>());
    return;
  }
  if (!is_sequence(obj))
    throw py::value_error("tensor(): ragged nested sequence (a number where a sequence was expected)");
  const auto seq = py::reinterpret_borrow<py::sequence>(obj);
  if (static_cast<int64_t>(seq.size()) != shape[depth])
    throw py::value_error("tensor(): ragged nested sequence (" + std::to_string(seq.size()) +
                          " items where " + std::to_string(shape[depth]) + " were expected)");
  for (const py::handle& item : seq) collect(item, depth + 1, shape, values, ints);
}

Tensor copy_of(const py::object& data, std::optional<DType> dtype, std::optional<Device> device,
               bool requires_grad) {
  Tensor t;
  if (py::isinstance<Tensor>(data) || py::hasattr(data, "__dlpack__") || PyObject_CheckBuffer(data.ptr())) {
    const Tensor src = as_tensor(data);
    py::gil_scoped_release release;
    t = src.detach().clone();
  } else {
    const Shape shape = nested_shape(data);
    std::vector<double> values;
    bool ints = true;
    collect(data, 0, shape, values, ints);
    t = from_vector(values, shape, dtype.value_or(ints ? DType::i64 : DType::f32));
  }
  py::gil_scoped_release release;
  if (dtype) t = t.to(*dtype);
  if (device) t = t.to(*device);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor as_tensor(const py::handle& obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (py::hasattr(obj, "__dlpack__")) return from_dlpack(py::reinterpret_borrow<py::object>(obj));
  if (PyObject_CheckBuffer(obj.ptr())) return from_buffer(obj);
  return copy_of(py::reinterpret_borrow<py::object>(obj), std::nullopt, std::nullopt, false);
}

void bind_interop(py::module_& m) {
  auto c = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  c.def("numpy", &to_numpy)
      .def("__array__", [](const py::object& self, const py::object& dtype) {
        py::array a = to_numpy(self);
        return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
      }, py::arg("dtype") = py::none())
      .def("__dlpack__", &to_dlpack, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Tensor& t) {
        return t.device().is_cuda() ? std::pair{int{kDLCUDA}, t.device().index} : std::pair{int{kDLCPU}, 0};
      });
  m.def("from_numpy", &from_buffer, py::arg("ndarray"),
        "A tensor over the array's memory (no copy); the array stays alive while the tensor does.");
  m.def("from_dlpack", &from_dlpack, py::arg("ext_tensor"),
        "A tensor over another framework's tensor (no copy), through its __dlpack__ or a capsule.");
  m.def("as_tensor", [](const py::object& data, std::optional<DType> dtype, std::optional<Device> device) {
    Tensor t = as_tensor(data);
    py::gil_scoped_release release;
    if (dtype) t = t.to(*dtype);
    if (device) t = t.to(*device);
    return t;
  }, py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("tensor", &copy_of, py::arg("data"), py::arg("dtype") = py::none(),
        py::arg("device") = py::none(), py::arg("requires_grad") = false,
        "A new tensor holding a copy of data (nested lists of numbers, an array, a tensor).");
}

}  // namespace ringflow::python
