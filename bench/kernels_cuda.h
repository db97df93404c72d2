// bench/kernels --device cuda (kernels_cuda.cpp in builds with CUDA, kernels_no_cuda.cpp
// otherwise): every convolution layer of the chosen models (bench/conv_layers.h) in forward,
// backward-data and backward-weights through ringflow's conv2d on CUDA, through the same raw
// cuDNN call made in the bench, and through PyTorch (bench/torch_conv_layers.py), with ratios;
// and sgemm 2048^3 against raw cuBLAS.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringflow/framework/memory_format.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow::bench {

struct CudaKernelOptions {
  std::vector<std::string> models;
  int64_t batch = 256;
  DType dtype = DType::f32;
  bool tf32 = false;
  MemoryFormat memory_format = MemoryFormat::automatic;  // auto: NHWC for 16-bit and TF32, NCHW for f32
  int warmup = 2;
  int repeat = 10;  // timed calls per pass and path (median reported)
  bool json = false;
  bool no_torch = false;
  std::string python = "/usr/bin/python3";
  std::string torch_script;  // bench/torch_conv_layers.py
};

// bench/kernels' exit status when no CUDA device can be used (nothing timed, the reason printed).
constexpr int kNoDevice = 77;

// Prints the table; returns the exit status: 0, 1 (a check failed), kNoDevice.
int run_cuda_kernels(const CudaKernelOptions& options);

}  // namespace ringflow::bench
