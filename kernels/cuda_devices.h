// What the process can see of CUDA, for skip logic and `--device cuda` checks.
// Implemented by kernels/cuda/ when built with CUDA, by kernels/no_cuda.cpp otherwise.
#pragma once

#include <string>

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

}  // namespace ringflow
