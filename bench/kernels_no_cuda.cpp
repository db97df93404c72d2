// bench/kernels --device cuda in a build without CUDA.
#include <stdexcept>

#include "ringflow/bench/kernels_cuda.h"

namespace ringflow::bench {

int run_cuda_kernels(const std::vector<int64_t>&, int, bool) {
  throw std::runtime_error("--device cuda: ringflow was built without CUDA (-Dcuda=disabled or nvcc not found)");
}

}  // namespace ringflow::bench
