// Copies between the host and CUDA devices (and between devices). Implemented by
// kernels/cuda/ when built with CUDA; kernels/no_cuda.cpp throws otherwise.
#pragma once

#include "kernels/device.h"
#include "kernels/view.h"

namespace ringflow {

// dst = src for views of the same shape on different devices (or both on one CUDA device),
// converting dtype, any strides (0 broadcasts in src). Dense views of one dtype and layout
// go in one cudaMemcpy; anything else is staged through a temporary buffer. When either
// side is the host the copy has finished when this returns (Note [CUDA streams] in
// kernels/cuda/cuda_kernels.h). Throws std::invalid_argument on a shape mismatch and
// std::runtime_error on a CUDA failure or in a build without CUDA.
void copy_between_devices(const View& dst, Device dst_device, const View& src, Device src_device);

}  // namespace ringflow
