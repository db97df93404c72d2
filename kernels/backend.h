// A backend is a table of kernel functions over Views, one table per implementation:
// reference (naive loops, the oracle for tests), cpu (oneDNN + own loops) and cuda.
// framework/dispatch.cpp is the one place that picks a table for a tensor's device.
//
// Conventions for every kernel:
// - outputs come first and are already allocated with their final shape and dtype;
// - inputs of elementwise kernels are already broadcast to the output shape (stride 0);
// - 4-D tensors are (N, C, H, W) in their sizes whatever their memory layout (strides);
// - a null entry means "not implemented here": dispatch throws naming the op and device.
//
// Note [blocked operands]: a table with `blocked_layout` may be handed Views in that layout
// (View::layout, kernels/memory_layout.h) by copy (either side: a reorder), the convolutions, batch
// norm, max/avg pooling (forward and backward, the outputs in the layout the framework
// allocated), and unary/binary where every operand has one shape and one layout (the
// strides then index memory in order, which is all an elementwise kernel needs). Every
// other entry only ever gets strided Views: the framework converts first (Tensor::kernel_view).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringflow/kernels/view.h"

namespace ringflow {

enum class UnaryOp : uint8_t { neg, exp, log, sqrt, relu, abs, sigmoid, tanh };
enum class BinaryOp : uint8_t {
  add, sub, mul, div, pow, maximum, minimum,
  eq, ne, lt, le, gt, ge,   // 1 where true, 0 where false, in the operands' dtype
  relu_backward,            // out = b <= 0 ? 0 : a  (a: incoming gradient, b: relu output;
                            // a NaN b passes a, as PyTorch's threshold_backward)
};
enum class ReduceOp : uint8_t { sum, mean, max, min, argmax };

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* reduce_op_name(ReduceOp op);

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

// PyTorch semantics: symmetric padding; ceil_mode lets the last window start inside the
// (left-)padded input; avg divisor counts padding cells (not ceil overhang) when
// count_include_pad, else only input cells.
struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

// One parameter's share of a fused optimizer step: param, grad and state buffers of one
// dtype and one memory layout (dense, same strides), numel elements each, on the table's
// device. state[0] is SGD's momentum buffer (null without momentum) or Adam's exp_avg;
// state[1] Adam's exp_avg_sq.
struct OptimizerSlot {
  void* param = nullptr;
  const void* grad = nullptr;
  void* state[2] = {nullptr, nullptr};
  int64_t numel = 0;
};

// torch.optim.SGD's rule: d = g + weight_decay * p; buf = d on the first step, else
// momentum * buf + (1 - dampening) * d; d = nesterov ? d + momentum * buf : buf (when
// momentum != 0); p -= lr * d.
// A loss scale still in the gradients, for a fused step that takes the grad scaler's work
// (PyTorch's fused optimizers' grad_scale and found_inf): each gradient element is multiplied
// by *inv_scale as it is read and rounded to the dtype, as unscale_grads would have stored it,
// so that the step equals unscale-then-step bit for bit; nothing is written where
// *found_inf != 0 (check_scaled_grads set it). f32 scalars on the slots' device, read there;
// null: the gradients are used as they are and the step always runs.
struct LossScale {
  const float* inv_scale = nullptr;
  const float* found_inf = nullptr;
};

struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the momentum buffers are uninitialised: they take d
  LossScale scale = {};
};

// torch.optim.Adam (coupled weight decay: g += wd * p) and AdamW (decoupled: p *= 1 - lr * wd):
// m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p -= step_size * m / (sqrt(v) / bc2_sqrt + eps), step_size = lr / (1 - beta1^t),
// bc2_sqrt = sqrt(1 - beta2^t).
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false;
  double step_size = 0, bc2_sqrt = 1;
  LossScale scale = {};
};

struct Backend {
  const char* name = "?";
  // The framework then allocates 4-D activations (conv outputs) channels-last (NHWC).
  bool prefers_channels_last = false;
  // The blocked layout (kernels/memory_layout.h) this table's convolutions compute `channels`-channel
  // activations of `dtype` in, and so the one the framework keeps them in between the ops of
  // Note [blocked operands]; strided where none. Null: none at all.
  MemoryLayout (*blocked_layout)(DType dtype, int64_t channels) = nullptr;

  // Memory of this backend's device.
  void* (*allocate)(size_t nbytes) = nullptr;
  void (*deallocate)(void* ptr, size_t nbytes) = nullptr;

  // dst = src elementwise, converting dtype; same shapes, any strides. Both on this device.
  void (*copy)(const View& dst, const View& src) = nullptr;
  void (*fill)(const View& dst, double value) = nullptr;
  // out[i] = low + (high - low) * u  etc. are done by the framework's generator on the host.

  void (*unary)(UnaryOp op, const View& out, const View& in) = nullptr;
  void (*binary)(BinaryOp op, const View& out, const View& a, const View& b) = nullptr;
  void (*where)(const View& out, const View& cond, const View& a, const View& b) = nullptr;

  // out has in's rank with size 1 in every reduced dim; argmax writes i64 and reduces
  // exactly one dim (first maximum wins, as PyTorch). sum/mean accumulate in f32 or wider.
  void (*reduce)(ReduceOp op, const View& out, const View& in) = nullptr;

  // out (B, M, N) = a (B, M, K) @ b (B, K, N); any strides (batch stride 0 broadcasts).
  void (*matmul)(const View& out, const View& a, const View& b) = nullptr;
  // Linear's forward as one kernel: out (M, N) = a (M, K) @ b (K, N) + bias (N), then relu
  // when asked, summed and biased in the accumulation type and rounded once (cuBLASLt's
  // BIAS and RELU_BIAS epilogues); floating dtypes, all operands of one. Null: the framework
  // composes matmul, add and relu.
  void (*matmul_bias)(const View& out, const View& a, const View& b, const View& bias, bool relu) = nullptr;

  // out = in.gather(dim, index); index i64 with out's shape.
  void (*gather)(const View& out, const View& in, int64_t dim, const View& index) = nullptr;
  // out.scatter_add_(dim, index, src): out[.., index[i], ..] += src[i].
  void (*scatter_add)(const View& out, int64_t dim, const View& index, const View& src) = nullptr;

  // x (N, C, H, W), w (K, C, R, S), bias (K) or null, y (N, K, P, Q).
  void (*conv2d_forward)(const View& y, const View& x, const View& w, const View* bias,
                         const Conv2dParams& p) = nullptr;
  void (*conv2d_backward_data)(const View& dx, const View& dy, const View& w,
                               const Conv2dParams& p) = nullptr;
  // db may be null.
  void (*conv2d_backward_weights)(const View& dw, const View* db, const View& dy,
                                  const View& x, const Conv2dParams& p) = nullptr;

  // The returned workspace (may be empty) is handed back to backward with the same x.
  Workspace (*max_pool2d_forward)(const View& y, const View& x, const Pool2dParams& p) = nullptr;
  void (*max_pool2d_backward)(const View& dx, const View& dy, const View& x,
                              const Workspace& ws, const Pool2dParams& p) = nullptr;
  void (*avg_pool2d_forward)(const View& y, const View& x, const Pool2dParams& p) = nullptr;
  void (*avg_pool2d_backward)(const View& dx, const View& dy, const Pool2dParams& p) = nullptr;
  // PyTorch's adaptive bins: start = floor(i*H/P), end = ceil((i+1)*H/P).
  void (*adaptive_avg_pool2d_forward)(const View& y, const View& x) = nullptr;
  void (*adaptive_avg_pool2d_backward)(const View& dx, const View& dy) = nullptr;

  // Batch norm over (N, H, W) per channel C of a 4-D x, or over N of a 2-D x (N, C).
  // gamma/beta may be null (no affine). Training writes the batch mean and the biased
  // variance; eval reads running mean and (unbiased) running variance. Stats are f32
  // (f64 for f64 inputs).
  void (*batch_norm_forward_train)(const View& y, const View& mean, const View& var,
                                   const View& x, const View* gamma, const View* beta,
                                   double eps) = nullptr;
  void (*batch_norm_forward_eval)(const View& y, const View& x, const View& mean,
                                  const View& var, const View* gamma, const View* beta,
                                  double eps) = nullptr;
  // mean/var as written by forward_train; dgamma/dbeta may be null.
  void (*batch_norm_backward)(const View& dx, const View* dgamma, const View* dbeta,
                              const View& dy, const View& x, const View& mean,
                              const View& var, const View* gamma, double eps) = nullptr;

  // Training batch norm fused with what follows it in VGG's and ResNet's blocks:
  // y = relu(bn(x) + residual), residual (x's shape) may be null. mean and var as
  // batch_norm_forward_train writes them.
  void (*batch_norm_relu_forward_train)(const View& y, const View& mean, const View& var,
                                        const View& x, const View* gamma, const View* beta,
                                        const View* residual, double eps) = nullptr;
  // Its backward, from the forward's output y: dz = y > 0 ? dy : 0, dresidual = dz (may be
  // null), and dx, dgamma, dbeta (may be null) as batch_norm_backward of dz.
  void (*batch_norm_relu_backward)(const View& dx, const View* dresidual, const View* dgamma,
                                   const View* dbeta, const View& dy, const View& y,
                                   const View& x, const View& mean, const View& var,
                                   const View* gamma, double eps) = nullptr;
  // A training batch norm's running statistics from its batch's (mean, biased var, `count`
  // elements per channel), in one launch: num_batches_tracked (an i64 scalar, may be null)
  // += 1; f = momentum, or 1 / num_batches_tracked when momentum < 0 (PyTorch's
  // momentum=None: a cumulative average); running_mean = (1 - f) running_mean + f mean;
  // running_var = (1 - f) running_var + f var count / (count - 1). running_* may be null.
  void (*batch_norm_update_stats)(const View* running_mean, const View* running_var,
                                  const View* num_batches_tracked, const View& mean,
                                  const View& var, double momentum, int64_t count) = nullptr;

  // Softmax (or log-softmax when log) along dim; backward takes the forward output y.
  void (*softmax_forward)(const View& y, const View& x, int64_t dim, bool log) = nullptr;
  void (*softmax_backward)(const View& dx, const View& dy, const View& y, int64_t dim,
                           bool log) = nullptr;

  // Fused optimizer updates over many parameters at once (one launch on a GPU), floating
  // dtypes; arithmetic in float (double for f64). A LossScale in the step is honoured only by
  // tables with check_scaled_grads (the others refuse one).
  void (*sgd_step)(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& s) = nullptr;
  void (*adam_step)(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamStep& s) = nullptr;
  // The grad scaler's unscale and check (torch._amp_foreach_non_finite_check_and_unscale_), in
  // one launch on a GPU: each slot's `param` is a gradient (grad and state unused), multiplied
  // in place by inv_scale (an f32 scalar on this device, read there: a captured step replays
  // with the current scale); found_inf (an f32 scalar on this device) is set to 1 where an
  // element is inf or NaN and left as it is otherwise.
  void (*unscale_grads)(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                        const View& found_inf) = nullptr;
  // The same check reading only (torch's fused optimizers' path): found_inf set exactly where
  // unscale_grads would set it (an element times inv_scale is inf or NaN), the gradients left
  // scaled for a step whose LossScale unscales them as it reads them. Tables with it take a
  // LossScale in sgd_step and adam_step.
  void (*check_scaled_grads)(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                             const View& found_inf) = nullptr;
};

// The tables. reference and cpu always exist; cuda_backend() returns null when ringflow
// was built without CUDA.
const Backend& reference_backend();
const Backend& cpu_backend();
// Whether this CPU has bf16 arithmetic (AVX512-BF16) and oneDNN uses it. Without it the CPU table's
// convolutions and matmuls take bf16 operands widened to f32 (exact) and round their results
// back: bf16 values at f32 speed. f16 operands always take that way (kernels/cpu/widen.h).
bool cpu_native_bf16();
const Backend* cuda_backend();

// Thread count used by the CPU kernels (oneDNN/OpenMP and own loops) for the process.
void set_num_threads(int n);
int num_threads();
// Restricts the calling thread and the CPU kernels' threads to `cpus` (sched_setaffinity's
// numbering, non-empty), e.g. to keep a core for a communication thread. Throws
// std::invalid_argument naming the CPUs the kernel refused.
void set_compute_cpus(const std::vector<int>& cpus);

// How the CPU backend computes convolutions, for the process. automatic: oneDNN chooses
// per shape, Winograd F(4x4, 3x3) for 3x3 stride-1 layers where it estimates that faster
// (AVX-512 machines; docs/kernels.md), at the price of rounding that differs from the plain
// sum (tests/cpu_kernels_test holds it to the same tolerance against the reference); bf16
// 3x3 stride-1 layers on CPUs with AVX512-BF16 and no AMX run our Winograd F(2x2, 3x3)
// (kernels/cpu/winograd.cpp), whose error is a few times a direct bf16 sum's.
// direct: every output is the plain sum, as PyTorch computes it on the CPU.
enum class ConvAlgorithm { automatic, direct };
void set_conv_algorithm(ConvAlgorithm algorithm);
ConvAlgorithm conv_algorithm();
const char* conv_algorithm_name(ConvAlgorithm algorithm);  // "auto", "direct"
// Sets the algorithm for a scope and restores the one before at its end.
class ConvAlgorithmGuard {
 public:
  explicit ConvAlgorithmGuard(ConvAlgorithm algorithm) : saved_(conv_algorithm()) {
    set_conv_algorithm(algorithm);
  }
  ~ConvAlgorithmGuard() { set_conv_algorithm(saved_); }
  ConvAlgorithmGuard(const ConvAlgorithmGuard&) = delete;
  ConvAlgorithmGuard& operator=(const ConvAlgorithmGuard&) = delete;

 private:
  ConvAlgorithm saved_;
};

// Whether the CUDA backend may compute f32 matmuls on TF32 tensor cores (inputs rounded to
// 10 mantissa bits): off by default, as PyTorch's torch.backends.cuda.matmul.allow_tf32,
// so that f32 results compare with the CPU backend's. For the process; no effect without CUDA.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The workspace cuDNN's convolutions may use per call, bytes: 1 GiB by default (the fast
// algorithms of VGG/ResNet layers at batch 256 fit it; PyTorch's benchmark takes what memory
// allows). Read when a shape's algorithm is searched, so set it before the first convolution.
// Throws std::invalid_argument for 0. For the process; no effect without cuDNN.
void set_cudnn_workspace_limit(size_t bytes);
size_t cudnn_workspace_limit();

}  // namespace ringflow
