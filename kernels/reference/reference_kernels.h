// The reference kernels: naive loops with PyTorch's semantics, accumulating in double
// (int64 for integer dtypes). Each concept lives in its own .cpp; backend.cpp collects
// them into reference_backend(). Errors throw std::invalid_argument naming the op.
#pragma once

#include <stdexcept>
#include <string>

#include "ringflow/kernels/backend.h"

namespace ringflow::reference {

// Throws "reference <op>: <what>" unless ok.
inline void check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string("reference ") + op + ": " + what);
}
inline void check_floating(const View& v, const char* op) {
  check(is_floating(v.dtype), op, std::string("needs a floating dtype, got ") +
                                      dtype_name(v.dtype));
}
inline void check_same_shape(const View& a, const View& b, const char* op) {
  check(a.shape == b.shape, op, "shape mismatch " + shape_str(a.shape) + " vs " +
                                    shape_str(b.shape));
}
inline void check_rank(const View& v, int rank, const char* op) {
  check(v.dim() == rank, op, "expected a " + std::to_string(rank) + "-D tensor, got " +
                                 shape_str(v.shape));
}

// elementwise.cpp
void copy(const View& dst, const View& src);
void fill(const View& dst, double value);
void unary(UnaryOp op, const View& out, const View& in);
void binary(BinaryOp op, const View& out, const View& a, const View& b);
void where(const View& out, const View& cond, const View& a, const View& b);

// reduce.cpp
void reduce(ReduceOp op, const View& out, const View& in);

// matmul.cpp
void matmul(const View& out, const View& a, const View& b);
void matmul_bias(const View& out, const View& a, const View& b, const View& bias, bool relu);

// index.cpp
void gather(const View& out, const View& in, int64_t dim, const View& index);
void scatter_add(const View& out, int64_t dim, const View& index, const View& src);

// conv.cpp
void conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                    const Conv2dParams& p);
void conv2d_backward_data(const View& dx, const View& dy, const View& w,
                          const Conv2dParams& p);
void conv2d_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                             const Conv2dParams& p);

// pool.cpp
Workspace max_pool2d_forward(const View& y, const View& x, const Pool2dParams& p);
void max_pool2d_backward(const View& dx, const View& dy, const View& x, const Workspace& ws,
                         const Pool2dParams& p);
void avg_pool2d_forward(const View& y, const View& x, const Pool2dParams& p);
void avg_pool2d_backward(const View& dx, const View& dy, const Pool2dParams& p);
void adaptive_avg_pool2d_forward(const View& y, const View& x);
void adaptive_avg_pool2d_backward(const View& dx, const View& dy);
// PyTorch's pooling output size (dilation 1), e.g. for callers sizing y.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         bool ceil_mode);

// norm.cpp
void batch_norm_forward_train(const View& y, const View& mean, const View& var,
                              const View& x, const View* gamma, const View* beta,
                              double eps);
void batch_norm_forward_eval(const View& y, const View& x, const View& mean, const View& var,
                             const View* gamma, const View* beta, double eps);
void batch_norm_backward(const View& dx, const View* dgamma, const View* dbeta,
                         const View& dy, const View& x, const View& mean, const View& var,
                         const View* gamma, double eps);
void batch_norm_relu_forward_train(const View& y, const View& mean, const View& var,
                                   const View& x, const View* gamma, const View* beta,
                                   const View* residual, double eps);
void batch_norm_relu_backward(const View& dx, const View* dresidual, const View* dgamma,
                              const View* dbeta, const View& dy, const View& y, const View& x,
                              const View& mean, const View& var, const View* gamma, double eps);
void batch_norm_update_stats(const View* running_mean, const View* running_var,
                             const View* num_batches_tracked, const View& mean, const View& var,
                             double momentum, int64_t count);

// softmax.cpp
void softmax_forward(const View& y, const View& x, int64_t dim, bool log);
void softmax_backward(const View& dx, const View& dy, const View& y, int64_t dim, bool log);

// optim.cpp
void sgd_step(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& h);
void adam_step(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamStep& h);
void unscale_grads(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                   const View& found_inf);
void check_scaled_grads(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                        const View& found_inf);

}  // namespace ringflow::reference
