// What the process can see of CUDA, for skip logic and `--device cuda` checks.
// Implemented by kernels/cuda/ when built with CUDA, by kernels/no_cuda.cpp otherwise.
#pragma once

#include <string>

namespace ringflow {

// Number of usable CUDA devices; 0 with the reason in *why (if given) when there are none
// (built without CUDA, no driver: cudaGetDeviceCount error 35, no device).
int cuda_device_count(std::string* why = nullptr);

}  // namespace ringflow
