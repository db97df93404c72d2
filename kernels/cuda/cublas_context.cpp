// cublas_handle(): Note in cublas_context.h.
#include "ringflow/kernels/cuda/cublas_context.h"

#include <map>
#include <mutex>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow::cuda {

cublasHandle_t cublas_handle() {
  int device = 0;
  RF_CHECK_CUDA(cudaGetDevice(&device));
  static std::mutex mutex;
  static auto* handles = new std::map<int, cublasHandle_t>;  // never destroyed: see header
  std::lock_guard lock(mutex);
  if (const auto it = handles->find(device); it != handles->end()) {
    RF_CHECK_CUBLAS(cublasSetStream(it->second, compute_stream()));  // a CUDA graph's, while capturing
    return it->second;
  }
  cublasHandle_t handle = nullptr;
  RF_CHECK_CUBLAS(cublasCreate(&handle));
  // Explicit, so that no default of a later cuBLAS turns on reduced precision unasked; f16
  // and bf16 products are summed in f32 all the way (no reduced-precision split-K sums).
  RF_CHECK_CUBLAS(cublasSetMathMode(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  RF_CHECK_CUBLAS(cublasSetStream(handle, compute_stream()));
  handles->emplace(device, handle);
  return handle;
}

}  // namespace ringflow::cuda
