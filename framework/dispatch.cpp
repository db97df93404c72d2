#include "ringflow/framework/dispatch.h"

namespace ringflow {
namespace {
thread_local const Backend* cpu_override = nullptr;

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
  if (device.is_cpu()) return cpu_override ? *cpu_override : cpu_backend();
  return cuda_table(device);
}

KernelTableGuard::KernelTableGuard(const Backend& table) : previous_(cpu_override) {
  cpu_override = &table;
}
KernelTableGuard::~KernelTableGuard() { cpu_override = previous_; }

}  // namespace ringflow
