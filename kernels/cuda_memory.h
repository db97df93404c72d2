// The CUDA caching allocator that serves every CUDA tensor (Note [Caching allocator policy]
// in kernels/caching_allocator.h): its statistics, emptying its cache, and record_stream.
// Implemented by kernels/cuda/allocator.cpp with CUDA; by kernels/no_cuda.cpp otherwise
// (statistics are zero, empty_cache does nothing).
#pragma once

#include "ringflow/kernels/caching_allocator.h"

struct CUstream_st;

namespace ringflow {

using CudaStream = CUstream_st*;  // cudaStream_t, without the CUDA headers

// The allocator of cuda:device; zeros for a device that has not allocated yet. Throws
// std::invalid_argument for a negative device index.
CachingAllocatorStats cuda_memory_stats(int device = 0);
void cuda_reset_peak_memory_stats(int device = 0);

// Gives the cached memory that no tensor uses back to CUDA (cudaFree), on every device,
// e.g. before another library or process needs the GPU. Waits for the streams that blocks
// freed after cuda_record_stream were used on.
void cuda_empty_cache();

// The memory at ptr (as returned by the CUDA backend's allocate) is also used by work queued
// on `stream` (null: the legacy default stream, where ringflow's kernels run): once freed it
// is not reused before the work queued there up to the free has completed. Throws
// std::invalid_argument for any other pointer, std::runtime_error in a build without CUDA.
void cuda_record_stream(void* ptr, CudaStream stream);

}  // namespace ringflow
