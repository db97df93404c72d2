// The SIMT reduce kernels (kernels/simt/reduce.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/reduce.h"

namespace ringflow::cuda {

void set_reduce_kernels(Backend& b) { simt::set_reduce_kernels<simt::DeviceExec>(b); }

}  // namespace ringflow::cuda
