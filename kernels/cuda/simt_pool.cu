// The SIMT pool kernels (kernels/simt/pool.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/pool.h"

namespace ringflow::cuda {

void set_pool_kernels(Backend& b) { simt::set_pool_kernels<simt::DeviceExec>(b); }

}  // namespace ringflow::cuda
