// The SIMT optimizer kernels (kernels/simt/optimizer.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/optimizer.h"

namespace ringflow::cuda {

void set_optimizer_kernels(Backend& b) { simt::set_optimizer_kernels<simt::DeviceExec>(b); }

}  // namespace ringflow::cuda
