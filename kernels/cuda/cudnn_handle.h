// One cuDNN handle per device, created on first use and kept for the process, on the legacy
// default stream as every kernel (Note [CUDA streams] in cuda_kernels.h). Never destroyed:
// cuDNN may already be unloaded when static destructors run.
#pragma once

#include <cudnn.h>

namespace ringflow::cuda {

// The handle of the calling thread's current device; throws naming cudnnCreate and cuDNN's
// message when there is no usable device.
cudnnHandle_t cudnn_handle();

}  // namespace ringflow::cuda
