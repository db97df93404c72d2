// cuda_device_count() for builds with CUDA: asks the runtime, and turns "no driver"
// (error 35 on machines with only the stub libcuda) into 0 devices plus a reason; and
// set_cuda_device(), DeviceScope and synchronize().
#include "ringflow/kernels/cuda_devices.h"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace ringflow {

int cuda_device_count(std::string* why) {
  int count = 0;  // the stub driver returns an error and leaves count unwritten
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: callers go on without CUDA
    if (why)
      *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status) + " (error " +
             std::to_string(static_cast<int>(status)) + ")";
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount: no CUDA device found";
  return count;
}

void set_cuda_device(int index) {
  const cudaError_t status = cudaSetDevice(index);
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error("cudaSetDevice(" + std::to_string(index) + ") failed: " +
                           cudaGetErrorString(status) + " (CUDA error " +
                           std::to_string(static_cast<int>(status)) + ")");
}

void DeviceScope::enter(int index) {
  int current = 0;
  const cudaError_t status = cudaGetDevice(&current);
  if (status == cudaSuccess && current == index) return;
  (void)cudaGetLastError();
  set_cuda_device(index);
  previous_ = status == cudaSuccess ? current : -1;
}

void DeviceScope::leave() noexcept {
  if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();  // not for a later check
}

void synchronize(Device device) {
  if (!device.is_cuda()) return;
  const DeviceScope scope(device);
  const cudaError_t status = cudaDeviceSynchronize();
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw std::runtime_error("cudaDeviceSynchronize on " + device.str() + " failed: " +
                           cudaGetErrorString(status) + " (CUDA error " +
                           std::to_string(static_cast<int>(status)) + ")");
}

}  // namespace ringflow
