// Direct 2-D convolution (cross-correlation, PyTorch's conv2d): the CUDA backend's
// convolutions where ringflow is built without cuDNN, and an oracle for cuDNN on a device.
// Forward: one thread per output; backward-data: one thread per input cell, summing over
// the (k, r, s) that reach it; backward-weights: one block per weight (and per bias)
// element, reducing over (n, p, q). Plain and slow next to cuDNN; accumulation in float
// (double for f64). Asymmetric padding and dilation as Conv2dParams says.
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/pool.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

struct ConvGeometry {
  int64_t N, C, H, W, K, R, S, P, Q;
  int64_t sh, sw, pt, pl, dh, dw;
};

template <class T>
struct ConvForwardBody {
  Nchw<T> y;
  Nchw<const T> x, w;
  const T* bias;  // null: none
  int64_t bias_stride;
  ConvGeometry g;
  RF_HD void operator()(int64_t i) const {
    int64_t n, k, p, q;
    unravel4(i, g.K, g.P, g.Q, n, k, p, q);
    acc_t<T> sum = bias ? load(bias[k * bias_stride]) : acc_t<T>(0);
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < g.R; ++r) {
        const int64_t h = p * g.sh - g.pt + r * g.dh;
        if (h < 0 || h >= g.H) continue;
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t ww = q * g.sw - g.pl + s * g.dw;
          if (ww < 0 || ww >= g.W) continue;
          sum += load(x.at(n, c, h, ww)) * load(w.at(k, c, r, s));
        }
      }
    y.at(n, k, p, q) = store<T>(sum);
  }
};

template <class T>
struct ConvBackwardDataBody {
  Nchw<T> dx;
  Nchw<const T> dy, w;
  ConvGeometry g;
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, h, ww;
    unravel4(i, g.C, g.H, g.W, n, c, h, ww);
    acc_t<T> sum = 0;
    for (int64_t r = 0; r < g.R; ++r) {
      const int64_t ph = h + g.pt - r * g.dh;  // p * sh when output row p reads row h
      if (ph < 0 || ph % g.sh != 0 || ph / g.sh >= g.P) continue;
      for (int64_t s = 0; s < g.S; ++s) {
        const int64_t qw = ww + g.pl - s * g.dw;
        if (qw < 0 || qw % g.sw != 0 || qw / g.sw >= g.Q) continue;
        for (int64_t k = 0; k < g.K; ++k)
          sum += load(dy.at(n, k, ph / g.sh, qw / g.sw)) * load(w.at(k, c, r, s));
      }
    }
    dx.at(n, c, h, ww) = store<T>(sum);
  }
};

template <class T>
struct ConvBackwardWeightsBody {
  Nchw<T> dw;
  Nchw<const T> dy, x;
  T* db;  // null: none
  int64_t db_stride;
  ConvGeometry g;
  int64_t weights;  // K * C * R * S: rows past it are the bias's

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t row) const {
    using A = acc_t<T>;
    const int64_t count = g.N * g.P * g.Q;
    const auto plus = [](A a, A b) { return a + b; };
    if (row >= weights) {  // db[k] = sum over (n, p, q) of dy
      const int64_t k = row - weights;
      const A sum = block.reduce(count, A(0), [&](int64_t j) {
        return load(dy.at(j / (g.P * g.Q), k, (j / g.Q) % g.P, j % g.Q));
      }, plus);
      block.for_each(1, [&](int64_t) { db[k * db_stride] = store<T>(sum); });
      return;
    }
    int64_t k, c, r, s;
    unravel4(row, g.C, g.R, g.S, k, c, r, s);
    const A sum = block.reduce(count, A(0), [&](int64_t j) {
      const int64_t n = j / (g.P * g.Q), p = (j / g.Q) % g.P, q = j % g.Q;
      const int64_t h = p * g.sh - g.pt + r * g.dh, ww = q * g.sw - g.pl + s * g.dw;
      if (h < 0 || h >= g.H || ww < 0 || ww >= g.W) return A(0);
      return load(dy.at(n, k, p, q)) * load(x.at(n, c, h, ww));
    }, plus);
    block.for_each(1, [&](int64_t) { dw.at(k, c, r, s) = store<T>(sum); });
  }
};

// Checks x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q) and p as the reference does.
inline ConvGeometry conv_geometry(const View& x, const View& w, const View& y,
                                  const Conv2dParams& p, const char* op) {
  check_rank(x, 4, op);
  check_rank(w, 4, op);
  check_rank(y, 4, op);
  check_floating(x, op);
  check_same_dtype(x, w, op);
  check_same_dtype(x, y, op);
  check(p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 && p.dilation_w > 0 &&
            p.pad_top >= 0 && p.pad_bottom >= 0 && p.pad_left >= 0 && p.pad_right >= 0,
        op, "stride and dilation must be positive and padding non-negative");
  const int64_t eh = (w.shape[2] - 1) * p.dilation_h + 1, ew = (w.shape[3] - 1) * p.dilation_w + 1;
  const int64_t P = (x.shape[2] + p.pad_top + p.pad_bottom - eh) / p.stride_h + 1;
  const int64_t Q = (x.shape[3] + p.pad_left + p.pad_right - ew) / p.stride_w + 1;
  check(w.shape[1] == x.shape[1] && y.shape[0] == x.shape[0] && y.shape[1] == w.shape[0] &&
            y.shape[2] == P && y.shape[3] == Q,
        op, "x " + shape_str(x.shape) + " and w " + shape_str(w.shape) + " do not give y " +
                shape_str(y.shape));
  return {x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2], w.shape[3],
          P, Q, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.dilation_h, p.dilation_w};
}

inline void check_bias(const View* b, const View& y, const char* op) {
  if (!b) return;
  check(b->dim() == 1 && b->shape[0] == y.shape[1] && b->dtype == y.dtype, op,
        "bias " + shape_str(b->shape) + " " + dtype_name(b->dtype) + " for y " + shape_str(y.shape));
}

template <class Exec>
void conv2d_forward(const Exec& exec, const View& y, const View& x, const View& w,
                    const View* bias, const Conv2dParams& p) {
  const ConvGeometry g = conv_geometry(x, w, y, p, "conv2d_forward");
  check_bias(bias, y, "conv2d_forward");
  visit_floating(x.dtype, "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(y.numel(), ConvForwardBody<T>{nchw<T>(y), nchw<const T>(x), nchw<const T>(w),
                                                   bias ? bias->ptr<const T>() : nullptr,
                                                   bias ? bias->strides[0] : 0, g});
  });
}

template <class Exec>
void conv2d_backward_data(const Exec& exec, const View& dx, const View& dy, const View& w,
                          const Conv2dParams& p) {
  const ConvGeometry g = conv_geometry(dx, w, dy, p, "conv2d_backward_data");
  visit_floating(dx.dtype, "conv2d_backward_data", [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(dx.numel(), ConvBackwardDataBody<T>{nchw<T>(dx), nchw<const T>(dy),
                                                         nchw<const T>(w), g});
  });
}

template <class Exec>
void conv2d_backward_weights(const Exec& exec, const View& dw, const View* db, const View& dy,
                             const View& x, const Conv2dParams& p) {
  const ConvGeometry g = conv_geometry(x, dw, dy, p, "conv2d_backward_weights");
  check_bias(db, dy, "conv2d_backward_weights");
  visit_floating(x.dtype, "conv2d_backward_weights", [&](auto tag) {
    using T = decltype(tag);
    const int64_t weights = dw.numel();
    exec.rows(weights + (db ? g.K : 0),
              ConvBackwardWeightsBody<T>{nchw<T>(dw), nchw<const T>(dy), nchw<const T>(x),
                                         db ? db->ptr<T>() : nullptr, db ? db->strides[0] : 0,
                                         g, weights});
  });
}

template <class Exec>
void set_conv_kernels(Backend& b) {
  b.conv2d_forward = [](const View& y, const View& x, const View& w, const View* bias,
                        const Conv2dParams& p) { conv2d_forward(Exec{}, y, x, w, bias, p); };
  b.conv2d_backward_data = [](const View& dx, const View& dy, const View& w,
                              const Conv2dParams& p) { conv2d_backward_data(Exec{}, dx, dy, w, p); };
  b.conv2d_backward_weights = [](const View& dw, const View* db, const View& dy, const View& x,
                                 const Conv2dParams& p) {
    conv2d_backward_weights(Exec{}, dw, db, dy, x, p);
  };
}

}  // namespace ringflow::simt
