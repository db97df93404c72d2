// The direct convolutions (kernels/simt/conv.h) instantiated for the GPU: the conv entries
// of a build without cuDNN.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/conv.h"

namespace ringflow::cuda {

void set_conv_kernels(Backend& b) { simt::set_conv_kernels<simt::DeviceExec>(b); }

}  // namespace ringflow::cuda
