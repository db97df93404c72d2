// Checks for every call into CUDA, cuBLAS, cuDNN and NCCL: on failure they throw
// std::runtime_error with file:line, the call as written and the library's own message,
// e.g. "kernels/cuda/backend.cpp:20: cudaMalloc(&ptr, nbytes) failed: out of memory
// (CUDA error 2)". Header-only; include it only from kernels/cuda/.
#pragma once

#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace ringflow::cuda {

[[noreturn]] inline void throw_library_error(const char* library, const char* call,
                                             const char* file, int line, int code,
                                             const char* message) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                           " failed: " + (message ? message : "unknown error") + " (" +
                           library + " error " + std::to_string(code) + ")");
}

}  // namespace ringflow::cuda

#define RF_CHECK_CUDA(call)                                                                \
  do {                                                                                     \
    const cudaError_t rf_status_ = (call);                                                 \
    if (rf_status_ != cudaSuccess) {                                                       \
      (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */  \
      ::ringflow::cuda::throw_library_error("CUDA", #call, __FILE__, __LINE__,             \
                                            static_cast<int>(rf_status_),                  \
                                            cudaGetErrorString(rf_status_));               \
    }                                                                                      \
  } while (0)

#define RF_CHECK_CUBLAS(call)                                                              \
  do {                                                                                     \
    const cublasStatus_t rf_status_ = (call);                                              \
    if (rf_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::ringflow::cuda::throw_library_error("cuBLAS", #call, __FILE__, __LINE__,           \
                                            static_cast<int>(rf_status_),                  \
                                            cublasGetStatusString(rf_status_));            \
  } while (0)

#define RF_CHECK_CUDNN(call)                                                               \
  do {                                                                                     \
    const cudnnStatus_t rf_status_ = (call);                                               \
    if (rf_status_ != CUDNN_STATUS_SUCCESS)                                                \
      ::ringflow::cuda::throw_library_error("cuDNN", #call, __FILE__, __LINE__,            \
                                            static_cast<int>(rf_status_),                  \
                                            cudnnGetErrorString(rf_status_));              \
  } while (0)

#define RF_CHECK_NCCL(call)                                                                \
  do {                                                                                     \
    const ncclResult_t rf_status_ = (call);                                                \
    if (rf_status_ != ncclSuccess)                                                         \
      ::ringflow::cuda::throw_library_error("NCCL", #call, __FILE__, __LINE__,             \
                                            static_cast<int>(rf_status_),                  \
                                            ncclGetErrorString(rf_status_));               \
  } while (0)
