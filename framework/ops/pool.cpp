// Pooling: max and average (PyTorch's output sizes, ceil_mode and padding rules) and
// adaptive average pooling. Outputs keep the input's layout, blocked ones too (Note [blocked
// tensors]).
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {

Pool2dParams pool2d_params(std::array<int64_t, 2> kernel_size,
                           std::optional<std::array<int64_t, 2>> stride,
                           std::array<int64_t, 2> padding, bool ceil_mode, bool count_include_pad) {
  Pool2dParams p;
  p.kernel_h = kernel_size[0];
  p.kernel_w = kernel_size[1];
  const auto s = stride.value_or(kernel_size);
  p.stride_h = s[0];
  p.stride_w = s[1];
  p.pad_h = padding[0];
  p.pad_w = padding[1];
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

namespace {

int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  const int64_t span = in + 2 * pad - k;
  if (span < 0) return 0;  // the window does not fit (C++'s division would round -3/5 up to 0)
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

void check_4d(const Tensor& x, const char* op) {
  RF_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", shape_str(x.shape()));
}

}  // namespace

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  RF_CHECK(x.size() == 4, "pool2d: input must be 4-D (N, C, H, W), got ", shape_str(x));
  RF_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0,
           "pool2d: kernel and stride must be positive");
  RF_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h * 2 <= p.kernel_h && p.pad_w * 2 <= p.kernel_w,
           "pool2d: padding (", p.pad_h, ", ", p.pad_w, ") must be at most half the kernel (",
           p.kernel_h, ", ", p.kernel_w, ")");
  const int64_t P = pooled_size(x[2], p.kernel_h, p.stride_h, p.pad_h, p.ceil_mode);
  const int64_t Q = pooled_size(x[3], p.kernel_w, p.stride_w, p.pad_w, p.ceil_mode);
  RF_CHECK(P > 0 && Q > 0, "pool2d: input ", shape_str(x), " is too small for a ", p.kernel_h,
           "x", p.kernel_w, " window (output would be ", P, "x", Q, ")");
  return {x[0], x[1], P, Q};
}

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  check_4d(x, "max_pool2d");
  Tensor y = empty_like_layout(x, pool2d_output_shape(x.shape(), p));
  Workspace ws = kernel(x.device(), &Backend::max_pool2d_forward, "max_pool2d_forward")(
      y.kernel_view_any_layout(), x.kernel_view_any_layout(), p);
  if (grad_needed({x}))
    record("MaxPool2dBackward", {x}, y, [x = x.detach(), ws, p](const Tensor& g) {
      Tensor dx = empty_like_layout(x, x.shape());
      kernel(g.device(), &Backend::max_pool2d_backward, "max_pool2d_backward")(
          dx.kernel_view_any_layout(), g.kernel_view_any_layout(), x.kernel_view_any_layout(), ws, p);
      return std::vector<Tensor>{dx};
    });
  return y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  check_4d(x, "avg_pool2d");
  Tensor y = empty_like_layout(x, pool2d_output_shape(x.shape(), p));
  kernel(x.device(), &Backend::avg_pool2d_forward, "avg_pool2d_forward")(
      y.kernel_view_any_layout(), x.kernel_view_any_layout(), p);
  if (grad_needed({x}))
    record("AvgPool2dBackward", {x}, y,
           [xs = x.shape(), layout = ActivationLayout(x), dtype = x.dtype(), p](const Tensor& g) {
      Tensor dx = layout.empty(xs, dtype, g.device());
      kernel(g.device(), &Backend::avg_pool2d_backward, "avg_pool2d_backward")(
          dx.kernel_view_any_layout(), g.kernel_view_any_layout(), p);
      return std::vector<Tensor>{dx};
    });
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  check_4d(x, "adaptive_avg_pool2d");
  RF_CHECK(output_size[0] > 0 && output_size[1] > 0 && x.size(2) > 0 && x.size(3) > 0,
           "adaptive_avg_pool2d: output size (", output_size[0], ", ", output_size[1],
           ") and input ", shape_str(x.shape()), " must be non-empty");
  Tensor y = empty_like_layout(x, {x.size(0), x.size(1), output_size[0], output_size[1]});
  kernel(x.device(), &Backend::adaptive_avg_pool2d_forward, "adaptive_avg_pool2d_forward")(
      y.kernel_view_any_layout(), x.kernel_view_any_layout());
  if (grad_needed({x}))
    record("AdaptiveAvgPool2dBackward", {x}, y,
           [xs = x.shape(), layout = ActivationLayout(x), dtype = x.dtype()](const Tensor& g) {
      Tensor dx = layout.empty(xs, dtype, g.device());
      kernel(g.device(), &Backend::adaptive_avg_pool2d_backward, "adaptive_avg_pool2d_backward")(
          dx.kernel_view_any_layout(), g.kernel_view_any_layout());
      return std::vector<Tensor>{dx};
    });
  return y;
}

}  // namespace ringflow
