// DeviceExec launches SIMT kernel bodies (kernels/simt/simt.h) on the current device's legacy
// default stream (Note [CUDA streams] in cuda_kernels.h), over the grid HostExec emulates
// (kernels/simt/host_exec.h): the same blocks, threads, shares and reduction tree.
// Include only from .cu files.
#pragma once

#include <cuda_runtime_api.h>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

// Bytes of shared memory per thread for block reductions: the largest reduced type.
constexpr int kMaxReduceBytes = 32;

struct DeviceBlock {
  unsigned char* smem;  // kBlock * kMaxReduceBytes bytes of shared memory

  template <class T, class Load, class Combine>
  RF_HD T reduce(int64_t len, T init, const Load& load, const Combine& combine) const {
#if defined(__CUDA_ARCH__)
    static_assert(sizeof(T) <= kMaxReduceBytes, "reduced type too large for the block's scratch");
    T acc = init;
    for (int64_t i = threadIdx.x; i < len; i += kBlock) acc = combine(acc, load(i));
    T* s = reinterpret_cast<T*>(smem);
    __syncthreads();  // the previous reduction's result has been read by every thread
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kBlock / 2; width > 0; width /= 2) {
      if (static_cast<int>(threadIdx.x) < width) s[threadIdx.x] = combine(s[threadIdx.x], s[threadIdx.x + width]);
      __syncthreads();
    }
    return s[0];
#else
    return init;  // never called on the host: HostExec uses HostBlock
#endif
  }

  template <class Fn>
  RF_HD void for_each(int64_t len, const Fn& fn) const {
#if defined(__CUDA_ARCH__)
    for (int64_t i = threadIdx.x; i < len; i += kBlock) fn(i);
#endif
  }
};

template <class F>
__global__ void __launch_bounds__(kBlock) elementwise_kernel(int64_t n, F f) {
  const int64_t step = int64_t{gridDim.x} * kBlock;
  for (int64_t i = int64_t{blockIdx.x} * kBlock + threadIdx.x; i < n; i += step) f(i);
}

template <class F>
__global__ void __launch_bounds__(kBlock) rows_kernel(int64_t rows, F f) {
  __shared__ alignas(16) unsigned char smem[kBlock * kMaxReduceBytes];
  const DeviceBlock block{smem};
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) f(block, r);
}

struct DeviceExec {
  // Device memory of `bytes` from the caching allocator that a later kernel reads; freed in
  // stream order, as every allocation (Note [CUDA streams] in cuda_kernels.h).
  static Workspace workspace(size_t bytes) {
    return std::shared_ptr<void>(cuda::allocate(bytes), [](void* p) { cuda::deallocate(p, 0); });
  }
  template <class F>
  void elementwise(int64_t n, const F& f) const {
    if (n <= 0) return;
    elementwise_kernel<<<static_cast<unsigned>(blocks_for(n)), kBlock, 0, cuda::compute_stream()>>>(n, f);
    RF_CHECK_CUDA(cudaGetLastError());
  }
  template <class F>
  void rows(int64_t rows, const F& f) const {
    if (rows <= 0) return;
    rows_kernel<<<static_cast<unsigned>(blocks_for_rows(rows)), kBlock, 0, cuda::compute_stream()>>>(rows, f);
    RF_CHECK_CUDA(cudaGetLastError());
  }
};

}  // namespace ringflow::simt
