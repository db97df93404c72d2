// Max, average and adaptive-average 2-D pooling, forward and backward, following PyTorch's
// CPU kernels (aten/src/ATen/native/cpu/{Max,Avg,AdaptiveAvg}PoolKernel.cpp) line by line
// where their choices are visible: window clipping, divisors, tie-breaking and NaN.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::load_f64;
using strided::offset4;
using strided::store_f64;

// Note [pool output size]: PyTorch's pooling_output_shape with dilation 1. ceil_mode rounds
// the window count up, but the last window must start inside the input or the left
// padding, never in the right padding alone.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride,
                         bool ceil_mode) {
  const int64_t num = in + 2 * pad - (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // floor division (div_rtn): num may be negative for windows larger than the input
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

namespace {

struct PoolShape {
  int64_t N, C, H, W, P, Q;
};

PoolShape pool_shape(const View& x, const View& y, const Pool2dParams& p, const char* op) {
  check_rank(x, 4, op);
  check_rank(y, 4, op);
  check_floating(x, op);
  check(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op,
        "kernel and stride must be positive");
  check(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h &&
            2 * p.pad_w <= p.kernel_w,
        op, "pad should be at most half of the kernel size (PyTorch's rule)");
  PoolShape s{x.shape[0], x.shape[1], x.shape[2], x.shape[3], y.shape[2], y.shape[3]};
  const int64_t P = pool_output_size(s.H, p.kernel_h, p.pad_h, p.stride_h, p.ceil_mode);
  const int64_t Q = pool_output_size(s.W, p.kernel_w, p.pad_w, p.stride_w, p.ceil_mode);
  check(y.shape[0] == s.N && y.shape[1] == s.C && s.P == P && s.Q == Q, op,
        "y " + shape_str(y.shape) + " but pooling " + shape_str(x.shape) + " gives " +
            std::to_string(P) + "x" + std::to_string(Q));
  return s;
}

// The input cell (ih, iw) of the window at (oh, ow) that max pooling selects: the first
// maximum in row-major order, or the last NaN; padding is never selected. A window of
// all -inf selects its first in-input cell, as PyTorch's maxindex starts there.
std::pair<int64_t, int64_t> argmax_cell(const View& x, int64_t n, int64_t c, int64_t oh,
                                        int64_t ow, const PoolShape& s,
                                        const Pool2dParams& p) {
  const int64_t h0 = std::max<int64_t>(oh * p.stride_h - p.pad_h, 0);
  const int64_t w0 = std::max<int64_t>(ow * p.stride_w - p.pad_w, 0);
  const int64_t h1 = std::min(oh * p.stride_h - p.pad_h + p.kernel_h, s.H);
  const int64_t w1 = std::min(ow * p.stride_w - p.pad_w + p.kernel_w, s.W);
  std::pair<int64_t, int64_t> best{h0, w0};
  double best_val = -std::numeric_limits<double>::infinity();
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) {
      const double v = load_f64(x, offset4(x, n, c, ih, iw));
      if (v > best_val || std::isnan(v)) {
        best_val = v;
        best = {ih, iw};
      }
    }
  return best;
}

// Average pooling window of output (oh, ow) clipped to the input, and its divisor.
// With count_include_pad the divisor is the window clipped to the padded input (so
// padding counts but ceil-mode overhang does not), computed before clipping to the input.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
};

AvgWindow avg_window(int64_t oh, int64_t ow, const PoolShape& s, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
  int64_t h1 = std::min(h0 + p.kernel_h, s.H + p.pad_h);
  int64_t w1 = std::min(w0 + p.kernel_w, s.W + p.pad_w);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, s.H);
  w1 = std::min(w1, s.W);
  const int64_t divisor = p.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, static_cast<double>(divisor)};
}

// PyTorch's adaptive bin [start, end) of output i of `out` over an input of `in`.
int64_t bin_start(int64_t i, int64_t out, int64_t in) { return (i * in) / out; }
int64_t bin_end(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

Workspace max_pool2d_forward(const View& y, const View& x, const Pool2dParams& p) {
  const PoolShape s = pool_shape(x, y, p, "max_pool2d_forward");
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t oh = 0; oh < s.P; ++oh)
        for (int64_t ow = 0; ow < s.Q; ++ow) {
          const auto [ih, iw] = argmax_cell(x, n, c, oh, ow, s, p);
          store_f64(y, offset4(y, n, c, oh, ow), load_f64(x, offset4(x, n, c, ih, iw)));
        }
  return nullptr;  // backward recomputes the argmax from x
}

void max_pool2d_backward(const View& dx, const View& dy, const View& x, const Workspace&,
                         const Pool2dParams& p) {
  const PoolShape s = pool_shape(x, dy, p, "max_pool2d_backward");
  check_same_shape(dx, x, "max_pool2d_backward");
  std::vector<double> acc(s.N * s.C * s.H * s.W, 0.0);  // (N, C, H, W) contiguous
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t oh = 0; oh < s.P; ++oh)
        for (int64_t ow = 0; ow < s.Q; ++ow) {
          const auto [ih, iw] = argmax_cell(x, n, c, oh, ow, s, p);
          acc[((n * s.C + c) * s.H + ih) * s.W + iw] +=
              load_f64(dy, offset4(dy, n, c, oh, ow));
        }
  strided::store_dense(dx, acc);
}

void avg_pool2d_forward(const View& y, const View& x, const Pool2dParams& p) {
  const PoolShape s = pool_shape(x, y, p, "avg_pool2d_forward");
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t oh = 0; oh < s.P; ++oh)
        for (int64_t ow = 0; ow < s.Q; ++ow) {
          const AvgWindow win = avg_window(oh, ow, s, p);
          double sum = 0.0;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw)
              sum += load_f64(x, offset4(x, n, c, ih, iw));
          store_f64(y, offset4(y, n, c, oh, ow), sum / win.divisor);
        }
}

void avg_pool2d_backward(const View& dx, const View& dy, const Pool2dParams& p) {
  const PoolShape s = pool_shape(dx, dy, p, "avg_pool2d_backward");
  std::vector<double> acc(s.N * s.C * s.H * s.W, 0.0);  // (N, C, H, W) contiguous
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t oh = 0; oh < s.P; ++oh)
        for (int64_t ow = 0; ow < s.Q; ++ow) {
          const AvgWindow win = avg_window(oh, ow, s, p);
          const double g = load_f64(dy, offset4(dy, n, c, oh, ow)) / win.divisor;
          for (int64_t ih = win.h0; ih < win.h1; ++ih)
            for (int64_t iw = win.w0; iw < win.w1; ++iw)
              acc[((n * s.C + c) * s.H + ih) * s.W + iw] += g;
        }
  strided::store_dense(dx, acc);
}

void adaptive_avg_pool2d_forward(const View& y, const View& x) {
  const char* op = "adaptive_avg_pool2d_forward";
  check_rank(x, 4, op);
  check_rank(y, 4, op);
  check_floating(x, op);
  check(y.shape[0] == x.shape[0] && y.shape[1] == x.shape[1], op, "N, C of x and y differ");
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t P = y.shape[2], Q = y.shape[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < P; ++oh)
        for (int64_t ow = 0; ow < Q; ++ow) {
          const int64_t h0 = bin_start(oh, P, H), h1 = bin_end(oh, P, H);
          const int64_t w0 = bin_start(ow, Q, W), w1 = bin_end(ow, Q, W);
          double sum = 0.0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += load_f64(x, offset4(x, n, c, ih, iw));
          store_f64(y, offset4(y, n, c, oh, ow),
                    sum / static_cast<double>((h1 - h0) * (w1 - w0)));
        }
}

void adaptive_avg_pool2d_backward(const View& dx, const View& dy) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_rank(dx, 4, op);
  check_rank(dy, 4, op);
  check_floating(dx, op);
  check(dy.shape[0] == dx.shape[0] && dy.shape[1] == dx.shape[1], op,
        "N, C of dx and dy differ");
  const int64_t N = dx.shape[0], C = dx.shape[1], H = dx.shape[2], W = dx.shape[3];
  const int64_t P = dy.shape[2], Q = dy.shape[3];
  std::vector<double> acc(N * C * H * W, 0.0);  // (N, C, H, W) contiguous
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < P; ++oh)
        for (int64_t ow = 0; ow < Q; ++ow) {
          const int64_t h0 = bin_start(oh, P, H), h1 = bin_end(oh, P, H);
          const int64_t w0 = bin_start(ow, Q, W), w1 = bin_end(ow, Q, W);
          const double g = load_f64(dy, offset4(dy, n, c, oh, ow)) /
                           static_cast<double>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc[((n * C + c) * H + ih) * W + iw] += g;
        }
  strided::store_dense(dx, acc);
}

}  // namespace ringflow::reference
