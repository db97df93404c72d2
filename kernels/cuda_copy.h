// Copies between the host and CUDA devices (and between devices). Implemented by
// kernels/cuda/ when built with CUDA; kernels/no_cuda.cpp throws otherwise.
#pragma once

#include <cstddef>

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

// Page-locked ("pinned") host memory, usable from every device (cudaHostAlloc with
// cudaHostAllocPortable): copies between it and a device run at the link's full speed,
// without the driver's bounce through its own pinned buffers. Slow to allocate and to free
// (cudaFreeHost waits for the device), so keep such a buffer for long and reuse it, as the
// MPI process group does with its staging area. nbytes 0 gives null. Throws
// std::runtime_error on a CUDA failure and in a build without CUDA.
void* allocate_pinned_host(size_t nbytes);
// Frees what allocate_pinned_host returned (null: nothing). Never throws: a failure is
// reported on stderr (none during process exit, when the CUDA runtime is unloading).
void free_pinned_host(void* ptr) noexcept;

}  // namespace ringflow
