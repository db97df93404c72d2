// conv2d forward, backward-data and backward-weights as direct loops over every
// (output pixel, tap) pair. Padding may be asymmetric (top/bottom/left/right); taps that
// land in padding contribute zero. One group; x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q).
#include <vector>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::load_f64;
using strided::offset4;

namespace {

struct ConvShape {
  int64_t N, C, H, W, K, R, S, P, Q;
};

// Validates the views against each other and against PyTorch's output-size formula.
ConvShape conv_shape(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p,
                     const char* op) {
  check(x.size() == 4 && w.size() == 4 && y.size() == 4, op, "x, w and y must be 4-D");
  ConvShape s{x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3]};
  check(w[1] == s.C, op, "w " + shape_str(w) + " does not match x " + shape_str(x));
  check(y[0] == s.N && y[1] == s.K, op, "y " + shape_str(y) + " does not match x/w");
  check(p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 && p.dilation_w > 0, op,
        "stride and dilation must be positive");
  const int64_t P = (s.H + p.pad_top + p.pad_bottom - p.dilation_h * (s.R - 1) - 1) /
                        p.stride_h + 1;
  const int64_t Q = (s.W + p.pad_left + p.pad_right - p.dilation_w * (s.S - 1) - 1) /
                        p.stride_w + 1;
  check(P == s.P && Q == s.Q, op, "y " + shape_str(y) + " but the output is " +
                                      std::to_string(P) + "x" + std::to_string(Q));
  return s;
}

// Calls fn(n, k, oh, ow, c, r, s, ih, iw) for every tap that lands inside the input.
template <class Fn>
void for_each_tap(const ConvShape& s, const Conv2dParams& p, Fn&& fn) {
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t oh = 0; oh < s.P; ++oh)
        for (int64_t ow = 0; ow < s.Q; ++ow)
          for (int64_t c = 0; c < s.C; ++c)
            for (int64_t r = 0; r < s.R; ++r) {
              const int64_t ih = oh * p.stride_h - p.pad_top + r * p.dilation_h;
              if (ih < 0 || ih >= s.H) continue;
              for (int64_t t = 0; t < s.S; ++t) {
                const int64_t iw = ow * p.stride_w - p.pad_left + t * p.dilation_w;
                if (iw < 0 || iw >= s.W) continue;
                fn(n, k, oh, ow, c, r, t, ih, iw);
              }
            }
}

}  // namespace

void conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                    const Conv2dParams& p) {
  check_floating(y, "conv2d_forward");
  const ConvShape s = conv_shape(x.shape, w.shape, y.shape, p, "conv2d_forward");
  check(!bias || bias->shape == Shape{s.K}, "conv2d_forward", "bias must be (K)");
  // acc: (N, K, P, Q) contiguous
  std::vector<double> acc(s.N * s.K * s.P * s.Q, 0.0);
  for_each_tap(s, p, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t c, int64_t r,
                         int64_t t, int64_t ih, int64_t iw) {
    acc[((n * s.K + k) * s.P + oh) * s.Q + ow] +=
        load_f64(x, offset4(x, n, c, ih, iw)) * load_f64(w, offset4(w, k, c, r, t));
  });
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k) {
      const double b = bias ? load_f64(*bias, k * bias->strides[0]) : 0.0;
      for (int64_t oh = 0; oh < s.P; ++oh)
        for (int64_t ow = 0; ow < s.Q; ++ow)
          strided::store_f64(y, offset4(y, n, k, oh, ow),
                             acc[((n * s.K + k) * s.P + oh) * s.Q + ow] + b);
    }
}

void conv2d_backward_data(const View& dx, const View& dy, const View& w,
                          const Conv2dParams& p) {
  check_floating(dx, "conv2d_backward_data");
  const ConvShape s = conv_shape(dx.shape, w.shape, dy.shape, p, "conv2d_backward_data");
  // acc: (N, C, H, W) contiguous; every tap scatters dy * w back to the pixel it read.
  std::vector<double> acc(s.N * s.C * s.H * s.W, 0.0);
  for_each_tap(s, p, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t c, int64_t r,
                         int64_t t, int64_t ih, int64_t iw) {
    acc[((n * s.C + c) * s.H + ih) * s.W + iw] +=
        load_f64(dy, offset4(dy, n, k, oh, ow)) * load_f64(w, offset4(w, k, c, r, t));
  });
  strided::store_dense(dx, acc);
}

void conv2d_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                             const Conv2dParams& p) {
  check_floating(dw, "conv2d_backward_weights");
  const ConvShape s = conv_shape(x.shape, dw.shape, dy.shape, p, "conv2d_backward_weights");
  // acc: (K, C, R, S) contiguous
  std::vector<double> acc(s.K * s.C * s.R * s.S, 0.0);
  for_each_tap(s, p, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t c, int64_t r,
                         int64_t t, int64_t ih, int64_t iw) {
    acc[((k * s.C + c) * s.R + r) * s.S + t] +=
        load_f64(dy, offset4(dy, n, k, oh, ow)) * load_f64(x, offset4(x, n, c, ih, iw));
  });
  strided::store_dense(dw, acc);
  if (db) {
    check(db->dim() == 1 && db->shape[0] == s.K, "conv2d_backward_weights", "db must be (K)");
    for (int64_t k = 0; k < s.K; ++k) {
      double sum = 0.0;
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t oh = 0; oh < s.P; ++oh)
          for (int64_t ow = 0; ow < s.Q; ++ow) sum += load_f64(dy, offset4(dy, n, k, oh, ow));
      strided::store_f64(*db, k * db->strides[0], sum);
    }
  }
}

}  // namespace ringflow::reference
