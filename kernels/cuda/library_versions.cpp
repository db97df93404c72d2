// cuda_library_versions() (kernels/build_info.h) for builds with CUDA: each library asked at
// run time, so that the report names what the process loaded, not what the build saw.
#include <cuda_runtime_api.h>
#include <cublas_api.h>
#include <library_types.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "ringflow/kernels/build_info.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow {
namespace {

// CUDA's encoding: 1000 * major + 10 * minor.
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "unknown (cublasGetProperty failed)";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

// NCCL 2.9 and later: 10000 * major + 100 * minor + patch.
std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown (ncclGetVersion failed)";
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

std::vector<LibraryVersion> cuda_library_versions() {
  int runtime = 0, driver = 0;
  const std::string runtime_text = cudaRuntimeGetVersion(&runtime) == cudaSuccess
                                       ? cuda_version_text(runtime)
                                       : "unknown (cudaRuntimeGetVersion failed)";
  // 0 where no driver is loaded (the stub libcuda of a machine without a GPU).
  std::string driver_text = "none (no CUDA driver)";
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    driver_text = cuda_version_text(driver) + " (the newest CUDA the driver runs)";
  (void)cudaGetLastError();
  return {{"CUDA runtime", runtime_text},
          {"CUDA driver", driver_text},
          {"cuBLAS", cublas_version()},
          {"cuDNN", cuda::cudnn_version()},
          {"NCCL", nccl_version()}};
}

}  // namespace ringflow
