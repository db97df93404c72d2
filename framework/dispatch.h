// The one place that maps a device to a kernel table (kernels/backend.h).
// CPU tensors run on the oneDNN table unless a KernelTableGuard is alive on this thread.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "ringflow/framework/error.h"
#include "ringflow/framework/op_profile.h"
#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/kernels/device.h"
#include "ringflow/kernels/view.h"

namespace ringflow {

// The table that owns the device's memory (allocation), independent of the guard.
const Backend& device_backend(Device device);
// The table whose kernels run ops on the device now.
const Backend& kernel_backend(Device device);

// While alive, CPU tensors on this thread run on `table` (a table over host memory): tests
// run the same op on the naive reference kernels, or on the CUDA backend's own kernels run
// on the host (simt_host_backend), and compare.
class KernelTableGuard {
 public:
  explicit KernelTableGuard(const Backend& table);
  ~KernelTableGuard();
  KernelTableGuard(const KernelTableGuard&) = delete;
  KernelTableGuard& operator=(const KernelTableGuard&) = delete;

 private:
  const Backend* previous_;
};

class ReferenceKernelsGuard : public KernelTableGuard {
 public:
  ReferenceKernelsGuard() : KernelTableGuard(reference_backend()) {}
};

namespace detail {
// The profile's name of a call: the op's, and with op_profiling_by_shape() each tensor
// operand's shape, its layout where not contiguous ("nhwc", oneDNN's blocked "nChw16c",
// "strided"), and its dtype before it where it differs from the previous operand's (the
// first's always): "copy bf16 (2, 3) f32 (2, 3)".
struct ProfileName {
  std::string text;
  std::optional<DType> dtype;  // the previous operand's
  void add(const View& v) {
    if (dtype != v.dtype) text += std::string(" ") + dtype_name(v.dtype);
    dtype = v.dtype;
    text += " " + shape_str(v.shape);
    if (v.layout != MemoryLayout::strided) text += memory_layout_name(v.layout);
    else if (!v.is_contiguous()) text += v.is_channels_last() ? "nhwc" : "strided";
  }
  void add(const View* v) {
    if (v) add(*v);
  }
  void add(View* v) { add(static_cast<const View*>(v)); }
  template <class T>
  void add(const T&) {}  // parameters, scalars
};
template <class... A>
std::string profile_name(const char* op, const A&... args) {
  ProfileName name{op};
  if (op_profiling_by_shape()) (name.add(args), ...);
  return name.text;
}
}  // namespace detail

// A kernel of a table, called with its device current (DeviceScope, kernels/cuda_devices.h).
template <class Fn>
struct KernelCall;
template <class R, class... Args>
struct KernelCall<R (*)(Args...)> {
  R (*fn)(Args...);
  Device device;
  const char* op;
  template <class... A>
  R operator()(A&&... args) const {
    const DeviceScope scope(device);
    if (!op_profiling()) [[likely]]
      return fn(std::forward<A>(args)...);
    const OpTimer timer(device, detail::profile_name(op, args...));
    return fn(std::forward<A>(args)...);
  }
};

// The kernel `entry` of the table for `device`, to be called on that device; throws naming
// the op and the device when that table has none.
template <class Fn>
KernelCall<Fn> kernel(Device device, Fn Backend::*entry, const char* op) {
  const Backend& backend = kernel_backend(device);
  Fn fn = backend.*entry;
  if (!fn)
    throw std::runtime_error(cat("op '", op, "' is not implemented on ", device.str(),
                                 " (kernel table '", backend.name, "')"));
  return {fn, device, op};
}

}  // namespace ringflow
