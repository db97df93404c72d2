// The SIMT elementwise kernels (kernels/simt/elementwise.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/elementwise.h"

namespace ringflow::cuda {

void set_elementwise_kernels(Backend& b) { simt::set_elementwise_kernels<simt::DeviceExec>(b); }

void copy(const View& dst, const View& src) { simt::copy(simt::DeviceExec{}, dst, src); }
void fill(const View& dst, double value) { simt::fill(simt::DeviceExec{}, dst, value); }

}  // namespace ringflow::cuda
