// conv2d: shape checks, forward on the device's kernel, backward via the data and weight
// gradient kernels. The output's layout follows the process's memory format
// (framework/memory_format.h: blocked, channels-last or contiguous); activations and their
// gradients in a blocked layout go to the kernels as they are (Note [blocked tensors]); under
// autocast a CUDA convolution that runs channels-last
// takes its weight's 16-bit cast laid out channels-last too.
#include "ringflow/framework/autocast.h"
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/memory_format.h"
#include "ringflow/framework/ops.h"

namespace ringflow {

Conv2dParams conv2d_params(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                           std::array<int64_t, 2> dilation) {
  Conv2dParams p;
  p.stride_h = stride[0];
  p.stride_w = stride[1];
  p.pad_top = p.pad_bottom = padding[0];
  p.pad_left = p.pad_right = padding[1];
  p.dilation_h = dilation[0];
  p.dilation_w = dilation[1];
  return p;
}

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  RF_CHECK(x.size() == 4, "conv2d: input must be 4-D (N, C, H, W), got ", shape_str(x));
  RF_CHECK(w.size() == 4, "conv2d: weight must be 4-D (K, C, R, S), got ", shape_str(w));
  RF_CHECK(x[1] == w[1], "conv2d: input ", shape_str(x), " has ", x[1],
           " channels but weight ", shape_str(w), " expects ", w[1]);
  RF_CHECK(p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 && p.dilation_w > 0 &&
               p.pad_top >= 0 && p.pad_bottom >= 0 && p.pad_left >= 0 && p.pad_right >= 0,
           "conv2d: stride and dilation must be positive and padding non-negative");
  const int64_t P = (x[2] + p.pad_top + p.pad_bottom - p.dilation_h * (w[2] - 1) - 1) / p.stride_h + 1;
  const int64_t Q = (x[3] + p.pad_left + p.pad_right - p.dilation_w * (w[3] - 1) - 1) / p.stride_w + 1;
  RF_CHECK(P > 0 && Q > 0, "conv2d: input ", shape_str(x), " is too small for kernel ",
           shape_str(w), " with this padding and dilation (output would be ", P, "x", Q, ")");
  return {x[0], w[0], P, Q};
}

namespace {

bool output_channels_last(const Tensor& x) {
  return conv_output_channels_last(memory_format(), x.device(), x.dtype(), x.is_channels_last(),
                                   kernel_backend(x.device()).prefers_channels_last, allow_tf32());
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  if (autocast_enabled() && (x.dtype() == DType::f32 || w.dtype() == DType::f32)) {
    const Tensor xl = autocast_to_low(x);
    // cuDNN runs channels-last where either activation is (kernels/cuda/cudnn_conv.cpp).
    const bool cl = x.device().is_cuda() && (output_channels_last(xl) || (xl.is_channels_last() && !xl.is_contiguous()));
    return conv2d(xl, autocast_to_low(w, cl), autocast_to_low(bias), p);
  }
  const Shape y_shape = conv2d_output_shape(x.shape(), w.shape(), p);
  RF_CHECK(x.dtype() == w.dtype() && x.device() == w.device(), "conv2d: input (",
           dtype_name(x.dtype()), " on ", x.device().str(), ") and weight (", dtype_name(w.dtype()),
           " on ", w.device().str(), ") differ");
  if (bias.defined())
    RF_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0) && bias.dtype() == w.dtype(),
             "conv2d: bias must be (", w.size(0), ") of dtype ", dtype_name(w.dtype()), ", got ",
             dtype_name(bias.dtype()), " ", shape_str(bias.shape()));
  const MemoryLayout blocked = conv_output_blocked_layout(memory_format(), kernel_backend(x.device()), x.dtype(), y_shape[1]);
  Tensor y = blocked != MemoryLayout::strided  ? empty_blocked(y_shape, blocked, x.dtype(), x.device())
             : output_channels_last(x) ? empty_channels_last(y_shape, x.dtype(), x.device())
                                       : empty(y_shape, x.dtype(), x.device());
  const View bv = bias.defined() ? bias.kernel_view() : View{};
  kernel(x.device(), &Backend::conv2d_forward, "conv2d_forward")(
      y.kernel_view_any_layout(), x.kernel_view_any_layout(), w.kernel_view(), bias.defined() ? &bv : nullptr, p);
  if (grad_needed({x, w, bias}))
    record("Conv2dBackward", {x, w, bias}, y,
           [x = x.detach(), w = w.detach(), p, rx = x.requires_grad(), rw = w.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             Tensor dx, dw, db;
             if (rx) {
               dx = empty_like_layout(x, x.shape());
               kernel(g.device(), &Backend::conv2d_backward_data, "conv2d_backward_data")(
                   dx.kernel_view_any_layout(), g.kernel_view_any_layout(), w.kernel_view(), p);
             }
             if (rw || rb) {
               // In w's layout (cuDNN writes it so directly); a parameter's (contiguous) into
               // its gradient buffer where offered (Note [Gradient buffers]).
               dw = rw && w.is_contiguous() ? new_input_grad(1, w.shape(), w.dtype(), w.device()) : empty_like(w);
               if (rb) db = new_input_grad(2, {w.size(0)}, w.dtype(), w.device());
               const View dbv = rb ? db.kernel_view() : View{};
               kernel(g.device(), &Backend::conv2d_backward_weights, "conv2d_backward_weights")(
                   dw.kernel_view(), rb ? &dbv : nullptr, g.kernel_view_any_layout(), x.kernel_view_any_layout(), p);
               if (!rw) dw = Tensor();
             }
             return std::vector<Tensor>{dx, dw, db};
           });
  return y;
}

}  // namespace ringflow
