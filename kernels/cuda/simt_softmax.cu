// The SIMT softmax kernels (kernels/simt/softmax.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/softmax.h"

namespace ringflow::cuda {

void set_softmax_kernels(Backend& b) { simt::set_softmax_kernels<simt::DeviceExec>(b); }

}  // namespace ringflow::cuda
