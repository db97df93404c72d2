// The functional API: every differentiable op on tensors. Each op checks its arguments
// (errors name the shapes and dtypes), runs the kernel of the tensors' device
// (framework/dispatch.h) and records its backward rule (framework/autograd.h).
// Binary ops broadcast like NumPy and need operands of one dtype and one device.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "ringflow/framework/random.h"
#include "ringflow/framework/tensor.h"
#include "ringflow/kernels/backend.h"

namespace ringflow {

// --- creation (ops/creation.cpp)
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
// Dense with NHWC strides; `shape` stays (N, C, H, W).
Tensor empty_channels_last(const Shape& shape, DType dtype = DType::f32,
                           Device device = Device::cpu());
// Same shape, dtype and device, and the same layout class (channels-last or contiguous; a
// blocked t gives contiguous).
Tensor empty_like(const Tensor& t);
// A 4-D (N, C, H, W) tensor in a blocked layout (kernels/memory_layout.h; C a multiple of its block),
// or contiguous for MemoryLayout::strided: Note [blocked tensors].
Tensor empty_blocked(const Shape& shape, MemoryLayout layout, DType dtype = DType::f32,
                     Device device = Device::cpu());
// How a tensor is laid out for kernels: its kernel_layout() where blocked, else channels-last
// or contiguous as empty_like; kept by a backward that does not keep the tensor itself.
struct ActivationLayout {
  MemoryLayout blocked = MemoryLayout::strided;
  bool channels_last = false;
  explicit ActivationLayout(const Tensor& t);
  // A new `shape` tensor so laid out (channels-last for a 4-D shape only).
  Tensor empty(const Shape& shape, DType dtype, Device device) const;
};
// `shape` in like's dtype, device and ActivationLayout: the outputs of the ops of Note [blocked
// operands].
Tensor empty_like_layout(const Tensor& like, const Shape& shape);
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
            Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());
// [start, end) in steps of step.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32,
              Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::i64);
// A tensor holding a copy of `values` (converted to dtype) with the given shape.
Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   DType dtype = DType::f32, Device device = Device::cpu());
template <class T>
Tensor from_data(const T* values, const Shape& shape, Device device = Device::cpu());
// A tensor over memory that the caller owns, without a copy (PyTorch's from_blob): shape and
// strides (elements; empty: contiguous, none negative) over `data` on `device`; `release`
// runs once no tensor uses the memory any more (Storage). Throws std::invalid_argument
// naming the shape and strides when they do not describe a tensor.
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device,
                 std::function<void()> release);
// Uniform in [low, high) and normal(mean, std) from the generator (the default one if null).
Tensor rand(const Shape& shape, Generator* gen = nullptr, DType dtype = DType::f32,
            double low = 0.0, double high = 1.0);
Tensor randn(const Shape& shape, Generator* gen = nullptr, DType dtype = DType::f32,
             double mean = 0.0, double std = 1.0);

// --- elementwise (ops/elementwise.cpp)
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
// A double operand becomes a 0-d tensor of the other operand's dtype and device.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor abs(const Tensor& a);
// Comparisons are not differentiable and give 1 or 0 in the operands' dtype.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// cond != 0 ? a : b, broadcast together; differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// The shape two shapes broadcast to; throws naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Sums a broadcast gradient back to `shape` (the inverse of expand).
Tensor sum_to(const Tensor& t, const Shape& shape);

// --- reductions (ops/reduce.cpp). dims empty = all dims; negative dims count from the end.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Unbiased when correction = 1 (PyTorch's default), population variance when 0.
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// Largest / smallest value over dims; the gradient is shared evenly between ties.
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Values of the maximum along dim; the gradient goes to the first maximum (argmax).
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements, as amax
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  // i64

// --- matmul (ops/matmul.cpp)
// NumPy semantics: 1-D operands are promoted and squeezed, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x @ w^T + bias; x (..., in), w (out, in), bias (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = {});
// relu(linear(x, w, bias)): an MLP layer's forward in one kernel where the device's table has
// matmul_bias (cuBLASLt's RELU_BIAS epilogue on CUDA), composed otherwise.
Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& bias = {});

// --- shape and indexing (ops/shape_ops.cpp, ops/index.cpp)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// out[i][j] = x[i][index[i][j]] for dim 1 (and so on); index is i64.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);

// --- convolution and pooling (ops/conv.cpp, ops/pool.cpp)
Conv2dParams conv2d_params(std::array<int64_t, 2> stride = {1, 1},
                           std::array<int64_t, 2> padding = {0, 0},
                           std::array<int64_t, 2> dilation = {1, 1});
// x (N, C, H, W), w (K, C, R, S), bias (K) or undefined -> (N, K, P, Q).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {},
              const Conv2dParams& p = {});
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);

// stride defaults to the kernel size, as in PyTorch.
Pool2dParams pool2d_params(std::array<int64_t, 2> kernel,
                           std::optional<std::array<int64_t, 2>> stride = std::nullopt,
                           std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false,
                           bool count_include_pad = true);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p);

// --- normalisation, activations, dropout (ops/norm.cpp, ops/activation.cpp)
// PyTorch's F.batch_norm: in training, normalises with the batch statistics and updates
// running_mean/running_var (if defined) in place with momentum; in eval uses them. The
// nn::BatchNorm2d module's bookkeeping too: num_batches_tracked (an i64 scalar, may be
// undefined) is counted in training, on the tensors' device (no host round trip), and
// momentum < 0 then means PyTorch's momentum=None (a cumulative average, 1 / count).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training,
                  double momentum = 0.1, double eps = 1e-5, const Tensor& num_batches_tracked = {});
// batch_norm, then relu(y + residual) (residual, of x's shape, may be undefined): the tail of
// VGG's and ResNet's blocks as one op, in the kernels of backend.h's batch_norm_relu_* where
// the device's table has them (training, residual of x's dtype), composed of batch_norm, add
// and relu otherwise.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const Tensor& residual = {}, const Tensor& num_batches_tracked = {});
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// --- losses (ops/loss.cpp)
enum class Reduction { mean, sum, none };
// logits (N, C), target i64 (N) with values in [0, C).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     Reduction reduction = Reduction::mean, double label_smoothing = 0.0);
// log_probs (N, C), target i64 (N).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target,
                Reduction reduction = Reduction::mean);

}  // namespace ringflow
