#include "ringflow/kernels/cuda/cudnn_handle.h"

#include <map>
#include <mutex>
#include <string>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow::cuda {

cudnnHandle_t cudnn_handle() {
  int device = 0;
  RF_CHECK_CUDA(cudaGetDevice(&device));
  static std::mutex mutex;
  static auto* handles = new std::map<int, cudnnHandle_t>;  // never destroyed: see header
  std::lock_guard lock(mutex);
  if (const auto it = handles->find(device); it != handles->end()) {
    RF_CHECK_CUDNN(cudnnSetStream(it->second, compute_stream()));  // a CUDA graph's, while capturing
    return it->second;
  }
  cudnnHandle_t handle = nullptr;
  RF_CHECK_CUDNN(cudnnCreate(&handle));
  RF_CHECK_CUDNN(cudnnSetStream(handle, compute_stream()));
  handles->emplace(device, handle);
  return handle;
}

std::string cudnn_version() {
  int major = 0, minor = 0, patch = 0;
  if (cudnnGetProperty(MAJOR_VERSION, &major) != CUDNN_STATUS_SUCCESS ||
      cudnnGetProperty(MINOR_VERSION, &minor) != CUDNN_STATUS_SUCCESS ||
      cudnnGetProperty(PATCH_LEVEL, &patch) != CUDNN_STATUS_SUCCESS)
    return "unknown (cudnnGetProperty failed)";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace ringflow::cuda
