// cublas_handle(): Note in cublas_context.h.
#include "ringflow/kernels/cuda/cublas_context.h"

#include <map>
#include <mutex>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow::cuda {

namespace {

struct Handle {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;  // cudaMalloc'ed once, never freed (as the handle)
};

// The workspace is set by hand because a CUDA graph's capture may not allocate (cuBLAS's own
// pool would), and again after every cublasSetStream, which resets it to that pool.
void use_stream(const Handle& h) {
  RF_CHECK_CUBLAS(cublasSetStream(h.handle, compute_stream()));  // a CUDA graph's, while capturing
  RF_CHECK_CUBLAS(cublasSetWorkspace(h.handle, h.workspace, kCublasWorkspaceBytes));
}

// The handle and workspace of the current device, made on first use.
const Handle& current_handle() {
  int device = 0;
  RF_CHECK_CUDA(cudaGetDevice(&device));
  static std::mutex mutex;
  static auto* handles = new std::map<int, Handle>;  // never destroyed: see header
  std::lock_guard lock(mutex);
  if (const auto it = handles->find(device); it != handles->end()) {
    use_stream(it->second);
    return it->second;
  }
  Handle h;
  RF_CHECK_CUBLAS(cublasCreate(&h.handle));
  // Explicit, so that no default of a later cuBLAS turns on reduced precision unasked; f16
  // and bf16 products are summed in f32 all the way (no reduced-precision split-K sums).
  RF_CHECK_CUBLAS(cublasSetMathMode(
      h.handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  RF_CHECK_CUDA(cudaMalloc(&h.workspace, kCublasWorkspaceBytes));
  use_stream(h);
  return handles->emplace(device, h).first->second;
}

}  // namespace

cublasHandle_t cublas_handle() { return current_handle().handle; }

void* cublas_workspace() { return current_handle().workspace; }

}  // namespace ringflow::cuda
