// The SIMT batch norm kernels (kernels/simt/batch_norm.h) instantiated for the GPU.
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/device_exec.cuh"
#include "ringflow/kernels/simt/batch_norm.h"

namespace ringflow::cuda {

void set_batch_norm_kernels(Backend& b) { simt::set_batch_norm_kernels<simt::DeviceExec>(b); }

void batch_norm_convert_stats(const View& out, const View& in, double eps, bool to_var) {
  simt::batch_norm_convert_stats(simt::DeviceExec{}, out, in, eps, to_var);
}

void batch_norm_add_relu(const View& y, const View* residual) {
  simt::add_relu(simt::DeviceExec{}, y, residual);
}

}  // namespace ringflow::cuda
