// bench/kernels --device cuda (kernels_cuda.cpp in builds with CUDA, kernels_no_cuda.cpp
// otherwise): ringflow's conv forward and matmul on the GPU against raw cuDNN and cuBLAS.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace ringflow::bench {

// Prints the table; returns the exit status (1: a check failed). Throws std::runtime_error
// without a usable GPU.
int run_cuda_kernels(const std::vector<int64_t>& batches, int repeat, bool tf32);

}  // namespace ringflow::bench
