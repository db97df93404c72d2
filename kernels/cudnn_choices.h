// What cuDNN was chosen to run for each convolution shape so far in the process: one line
// per (direction, dtype, shapes, layout) with the winning candidate and the best of each other
// source: cuDNN's other API, and cuBLAS's GEMM for a 1x1 convolution
// (kernels/cuda/cudnn_conv.cpp). bench/kernels and bench/train_step --profile-ops print them,
// so that a GPU run shows whether 16-bit convolutions reach tensor-core kernels.
#pragma once

#include <string>
#include <vector>

namespace ringflow {

// Empty in builds without cuDNN.
std::vector<std::string> cudnn_conv_choices();
// The same for training batch norm over channels-last x: each way's time and the one kept
// (Note [Batch norm on channels-last] in kernels/cuda/cudnn_batch_norm.cpp).
std::vector<std::string> cudnn_batch_norm_choices();

}  // namespace ringflow
