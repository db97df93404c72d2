// One cuBLAS handle per device, created on first use and kept for the process (creating one
// allocates device memory and costs milliseconds). Its stream is the legacy default stream,
// as for every kernel (Note [CUDA streams] in cuda_kernels.h); its math mode starts as
// CUBLAS_DEFAULT_MATH, which keeps f32 GEMMs in full f32 (matmul.cpp sets it per call from
// allow_tf32()). The handles are never destroyed: cuBLAS may already be unloaded when
// static destructors run at exit.
#pragma once

#include <cublas_v2.h>

namespace ringflow::cuda {

// The handle of the calling thread's current device. Throws std::runtime_error naming
// cublasCreate and cuBLAS's message when there is no usable device.
cublasHandle_t cublas_handle();

}  // namespace ringflow::cuda
