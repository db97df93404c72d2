#include "framework/dispatch.h"

namespace ringflow {
namespace {
thread_local bool use_reference = false;

const Backend& cuda_table(Device device) {
  const Backend* cuda = cuda_backend();
  if (!cuda)
    throw std::runtime_error(cat("device ", device.str(),
                                 " requested, but ringflow was built without CUDA"));
  return *cuda;
}
}  // namespace

const Backend& device_backend(Device device) {
  return device.is_cpu() ? cpu_backend() : cuda_table(device);
}

const Backend& kernel_backend(Device device) {
  if (device.is_cpu()) return use_reference ? reference_backend() : cpu_backend();
  return cuda_table(device);
}

ReferenceKernelsGuard::ReferenceKernelsGuard() : previous_(use_reference) { use_reference = true; }
ReferenceKernelsGuard::~ReferenceKernelsGuard() { use_reference = previous_; }

}  // namespace ringflow
