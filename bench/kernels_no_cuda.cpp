// bench/kernels --device cuda in a build without CUDA: says so and skips (kNoDevice).
#include <fmt/core.h>

#include "ringflow/bench/kernels_cuda.h"

namespace ringflow::bench {

int run_cuda_kernels(const CudaKernelOptions&) {
  fmt::print("kernels --device cuda: no CUDA device (ringflow was built without CUDA: -Dcuda=disabled or nvcc "
             "not found): nothing timed\n");
  return kNoDevice;
}

}  // namespace ringflow::bench
