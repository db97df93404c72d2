// reference_backend(): the table of naive kernels that every other backend is tested
// against. Host memory, so it shares the CPU allocator.
#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/kernels/reference/reference_kernels.h"

namespace ringflow {

const Backend& reference_backend() {
  static const Backend table = [] {
    Backend b;
    b.name = "reference";
    b.allocate = cpu_allocate;
    b.deallocate = cpu_deallocate;
    b.copy = reference::copy;
    b.fill = reference::fill;
    b.unary = reference::unary;
    b.binary = reference::binary;
    b.where = reference::where;
    b.reduce = reference::reduce;
    b.matmul = reference::matmul;
    b.matmul_bias = reference::matmul_bias;
    b.gather = reference::gather;
    b.scatter_add = reference::scatter_add;
    b.conv2d_forward = reference::conv2d_forward;
    b.conv2d_backward_data = reference::conv2d_backward_data;
    b.conv2d_backward_weights = reference::conv2d_backward_weights;
    b.max_pool2d_forward = reference::max_pool2d_forward;
    b.max_pool2d_backward = reference::max_pool2d_backward;
    b.avg_pool2d_forward = reference::avg_pool2d_forward;
    b.avg_pool2d_backward = reference::avg_pool2d_backward;
    b.adaptive_avg_pool2d_forward = reference::adaptive_avg_pool2d_forward;
    b.adaptive_avg_pool2d_backward = reference::adaptive_avg_pool2d_backward;
    b.batch_norm_forward_train = reference::batch_norm_forward_train;
    b.batch_norm_forward_eval = reference::batch_norm_forward_eval;
    b.batch_norm_backward = reference::batch_norm_backward;
    b.batch_norm_relu_forward_train = reference::batch_norm_relu_forward_train;
    b.batch_norm_relu_backward = reference::batch_norm_relu_backward;
    b.batch_norm_update_stats = reference::batch_norm_update_stats;
    b.softmax_forward = reference::softmax_forward;
    b.softmax_backward = reference::softmax_backward;
    b.sgd_step = reference::sgd_step;
    b.adam_step = reference::adam_step;
    b.unscale_grads = reference::unscale_grads;
    b.check_scaled_grads = reference::check_scaled_grads;
    return b;
  }();
  return table;
}

}  // namespace ringflow
