// The CUDA backend table. For now it holds memory (the caching allocator, allocator.cpp),
// copy, fill and matmul (cuBLAS); every other entry is null, so dispatch throws "op X not
// implemented on cuda". Streams: Note [CUDA streams] in cuda_kernels.h.
#include "kernels/backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ringflow {
namespace cuda {

DeviceGuard::DeviceGuard(int index) {
  RF_CHECK_CUDA(cudaGetDevice(&previous_));
  if (previous_ != index) {
    RF_CHECK_CUDA(cudaSetDevice(index));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);  // cannot throw from a destructor
}

}  // namespace cuda

const Backend* cuda_backend() {
  static const Backend table = [] {
    Backend b;
    b.name = "cuda";
    b.allocate = cuda::allocate;
    b.deallocate = cuda::deallocate;
    b.copy = cuda::copy;
    b.fill = cuda::fill;
    b.matmul = cuda::matmul;
    return b;
  }();
  return &table;
}

}  // namespace ringflow
