// What the process can see of CUDA, for skip logic and `--device cuda` checks.
// Implemented by kernels/cuda/ when built with CUDA, by kernels/no_cuda.cpp otherwise.
#pragma once

#include <stdexcept>
#include <string>

#include "ringflow/kernels/device.h"

namespace ringflow {

// Number of usable CUDA devices; 0 with the reason in *why (if given) when there are none
// (built without CUDA, no driver: cudaGetDeviceCount error 35, no device).
int cuda_device_count(std::string* why = nullptr);

// Makes cuda:index the calling thread's current device. The CUDA backend allocates and
// runs on the current device (Note [CUDA streams] in kernels/cuda/cuda_kernels.h), so a
// thread that creates or computes on tensors of cuda:index must make it current first
// (NcclProcessGroup does so for the thread that constructs it). Throws std::runtime_error
// naming the device and CUDA's message, or that ringflow was built without CUDA.
void set_cuda_device(int index);

// Waits until everything queued on `device` has run (cudaDeviceSynchronize); nothing for the
// CPU. For timing: kernels are asynchronous to the host. Throws naming CUDA's error.
void synchronize(Device device);

// Makes `device` the calling thread's current CUDA device for the scope's lifetime, then
// restores the previous one; does nothing for the CPU. framework/dispatch.h runs every
// allocation and kernel call of a CUDA tensor inside one, so a tensor on cuda:1 lives and
// computes on GPU 1 whatever device the thread has current. Throws as set_cuda_device.
class DeviceScope {
 public:
  explicit DeviceScope(Device device) {
    if (device.is_cuda()) enter(device.index);
  }
  ~DeviceScope() {
    if (previous_ >= 0) leave();
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  void enter(int index);
  void leave() noexcept;
  int previous_ = -1;  // the device to restore, -1: none changed
};

}  // namespace ringflow
