// The SIMT index kernels (kernels/simt/index.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/index.h"

namespace ringflow::cuda {

void set_index_kernels(Backend& b) { simt::set_index_kernels<simt::DeviceExec>(b); }

}  // namespace ringflow::cuda
