// The CUDA backend table: memory (the caching allocator, allocator.cpp), the own kernels of
// kernels/simt/ (simt_*.cu), matmul on cuBLAS, convolutions on cuDNN
// (or own kernels without it). Streams: Note [CUDA streams] in cuda_kernels.h.
#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"

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
    cuda::set_elementwise_kernels(b);
    cuda::set_reduce_kernels(b);
    cuda::set_softmax_kernels(b);
    cuda::set_index_kernels(b);
    cuda::set_pool_kernels(b);
    cuda::set_batch_norm_kernels(b);
    cuda::use_cudnn_batch_norm(b);  // training; the own kernels stay for what cuDNN does not take
    cuda::set_optimizer_kernels(b);
    b.matmul = cuda::matmul;
    b.matmul_bias = cuda::matmul_bias;
    cuda::set_conv_kernels(b);
    return b;
  }();
  return &table;
}

}  // namespace ringflow
