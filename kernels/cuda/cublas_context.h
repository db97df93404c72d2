// One cuBLAS handle per device, created on first use and kept for the process (creating one
// allocates device memory and costs milliseconds). Its stream is the legacy default stream,
// as for every kernel (Note [CUDA streams] in cuda_kernels.h); its math mode stays
// CUBLAS_DEFAULT_MATH without reduced-precision reductions: matmul.cpp passes the compute type with each call (TF32 only when
// allow_tf32()), so threads sharing the handle change none of its state. The handles are
// never destroyed: cuBLAS may already be unloaded when static destructors run at exit.
#pragma once

#include <cublas_v2.h>
#include <stdexcept>

namespace ringflow::cuda {

// The handle of the calling thread's current device. Throws std::runtime_error naming
// cublasCreate and cuBLAS's message when there is no usable device.
cublasHandle_t cublas_handle();

// The workspace set on that handle (kCublasWorkspaceBytes: 32 MiB, NVIDIA's advice for
// Hopper; allocated with it). cuBLASLt's
// calls on the same stream share it, as PyTorch's do: the calls run in stream order.
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
void* cublas_workspace();

}  // namespace ringflow::cuda
