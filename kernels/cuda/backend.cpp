// The CUDA backend table. For now it holds memory, copy and fill; every other entry is
// null, so dispatch throws "op X not implemented on cuda". Streams: Note [CUDA streams]
// in cuda_kernels.h.
#include <cstdio>

#include "kernels/backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ringflow {
namespace cuda {

void* allocate(size_t nbytes) {
  void* ptr = nullptr;
  if (nbytes > 0) RF_CHECK_CUDA(cudaMalloc(&ptr, nbytes));
  return ptr;
}

// Called from destructors (Storage, DeviceBuffer), so it must not throw: a failure is
// reported on stderr. cudaErrorCudartUnloading (tensors freed during process exit, after
// the runtime shut down) is expected and ignored.
void deallocate(void* ptr, size_t /*nbytes*/) {
  if (!ptr) return;
  const cudaError_t status = cudaFree(ptr);
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  if (status != cudaErrorCudartUnloading)
    std::fprintf(stderr, "ringflow: cudaFree(%p) failed: %s (CUDA error %d)\n", ptr,
                 cudaGetErrorString(status), static_cast<int>(status));
}

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
    return b;
  }();
  return &table;
}

}  // namespace ringflow
