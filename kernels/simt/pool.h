// Max, average and adaptive-average 2-D pooling: forward one thread per output, backward one
// thread per input cell summing over the windows that hold it (no atomics, deterministic).
// Max pooling's forward keeps each window's argmax for the backward (its workspace). Window rules (clipping, divisors, ties, NaN) as kernels/reference/pool.cpp.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/fast_div.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

// A 4-D operand: base pointer and (N, C, H, W) strides, in elements.
template <class T>
struct Nchw {
  T* p;
  int64_t sn, sc, sh, sw;
  RF_HD T& at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return p[n * sn + c * sc + h * sh + w * sw];
  }
};
template <class T>
Nchw<T> nchw(const View& v) {
  return {static_cast<T*>(v.data), v.strides[0], v.strides[1], v.strides[2], v.strides[3]};
}

// The order a kernel's threads walk a 4-D operand of sizes (N, C, H, W) in: (N, C, H, W)
// row-major, or (N, H, W, C) where the operand is channels-last in memory, so that adjacent
// threads touch adjacent addresses either way (walking channels-last memory in NCHW order, a
// warp's 32 reads land C elements apart). Built on the host: its divisions are FastDivs.
class Walk4 {
 public:
  Walk4() = default;
  Walk4(bool channels_last, int64_t N, int64_t C, int64_t H, int64_t W)
      : channels_last_(channels_last), C_(C), H_(H), W_(W) {
    const int64_t n = N * C * H * W;
    if (channels_last) {
      inner_ = FastDiv(C, n), middle_ = FastDiv(W, n), outer_ = FastDiv(H, n);
    } else {
      inner_ = FastDiv(W, n), middle_ = FastDiv(H, n), outer_ = FastDiv(C, n);
    }
  }
  RF_HD bool channels_last() const { return channels_last_; }
  // Linear index -> its coordinates in this order.
  RF_HD void unravel(int64_t i, int64_t& n, int64_t& c, int64_t& h, int64_t& w) const {
    if (channels_last_) {
      inner_.divmod(i, i, c);
      middle_.divmod(i, i, w);
      outer_.divmod(i, n, h);
      return;
    }
    inner_.divmod(i, i, w);
    middle_.divmod(i, i, h);
    outer_.divmod(i, n, c);
  }
  // Coordinates -> linear index, the inverse of unravel.
  RF_HD int64_t ravel(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return channels_last_ ? ((n * H_ + h) * W_ + w) * C_ + c : ((n * C_ + c) * H_ + h) * W_ + w;
  }
  // What one step along h or w adds to the linear index.
  RF_HD int64_t h_step() const { return channels_last_ ? W_ * C_ : W_; }
  RF_HD int64_t w_step() const { return channels_last_ ? C_ : 1; }

 private:
  bool channels_last_ = false;
  int64_t C_ = 1, H_ = 1, W_ = 1;
  FastDiv inner_, middle_, outer_;
};

// v's walk: channels-last where v is so in memory (and not also contiguous).
inline Walk4 walk_of(const View& v) {
  return {v.is_channels_last() && !v.is_contiguous(), v.shape[0], v.shape[1], v.shape[2], v.shape[3]};
}

struct PoolGeometry {
  int64_t N, C, H, W, P, Q;
  int64_t kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
  Walk4 in, out;  // over x (N, C, H, W) and y (N, C, P, Q), both in x's memory order
  FastDiv by_sh, by_sw;

  RF_HD static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
  RF_HD static int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }

  // The input cell max pooling selects in window (oh, ow) of the plane at `x` (strides xh,
  // xw): the first maximum in row-major order, or the last NaN; a window of all -inf selects
  // its first cell.
  template <class T, class I>
  RF_HD void argmax_cell(const T* x, I xh, I xw, int64_t oh, int64_t ow, int64_t& bh, int64_t& bw) const {
    using A = acc_t<T>;
    const I h0 = static_cast<I>(max(oh * sh - ph, 0)), w0 = static_cast<I>(max(ow * sw - pw, 0));
    const I h1 = static_cast<I>(min(oh * sh - ph + kh, H)), w1 = static_cast<I>(min(ow * sw - pw + kw, W));
    I best_h = h0, best_w = w0;
    A best = lowest<A>();
    for (I ih = h0; ih < h1; ++ih)
      for (I iw = w0; iw < w1; ++iw) {
        const A v = load(x[ih * xh + iw * xw]);
        if (v > best || isnan(v)) {
          best = v;
          best_h = ih;
          best_w = iw;
        }
      }
    bh = best_h;
    bw = best_w;
  }

  // Average window of output (oh, ow) clipped to the input, and its divisor (Note in
  // kernels/reference/pool.cpp: padding counts with count_include_pad, ceil overhang never).
  RF_HD void avg_window(int64_t oh, int64_t ow, int64_t& h0, int64_t& h1, int64_t& w0,
                        int64_t& w1, int64_t& divisor) const {
    h0 = oh * sh - ph;
    w0 = ow * sw - pw;
    h1 = min(h0 + kh, H + ph);
    w1 = min(w0 + kw, W + pw);
    const int64_t padded = (h1 - h0) * (w1 - w0);
    h0 = max(h0, 0);
    w0 = max(w0, 0);
    h1 = min(h1, H);
    w1 = min(w1, W);
    divisor = count_include_pad ? padded : (h1 - h0) * (w1 - w0);
  }

  // Outputs along one axis whose (unclipped) window [o * s - pad, o * s - pad + k) holds i.
  RF_HD static void windows_holding(int64_t i, int64_t k, const FastDiv& s, int64_t pad, int64_t out,
                                    int64_t& lo, int64_t& hi) {
    lo = i + pad < k ? 0 : s.div(i + pad - k) + 1;
    hi = min(out - 1, s.div(i + pad));
  }
  RF_HD void rows_holding(int64_t ih, int64_t& lo, int64_t& hi) const {
    windows_holding(ih, kh, by_sh, ph, P, lo, hi);
  }
  RF_HD void columns_holding(int64_t iw, int64_t& lo, int64_t& hi) const {
    windows_holding(iw, kw, by_sw, pw, Q, lo, hi);
  }
};

// PyTorch's adaptive bins along one axis: output i averages input [start(i), end(i)).
// Built on the host, with FastDivs: the backward divided eight times per element with `/`
// (a sequence of instructions each on a GPU), and ResNet-50's global average pooling's
// backward took 0.76 ms on the H200 for its (256, 2048, 7, 7) f32, whose 103 MB take ~0.03.
struct AdaptiveBins {
  int64_t in = 1, out = 1;
  FastDiv by_out, by_in;
  AdaptiveBins() = default;
  AdaptiveBins(int64_t in_size, int64_t out_size)
      : in(in_size), out(out_size), by_out(out_size, out_size * (in_size + 1)), by_in(in_size, in_size * out_size) {}
  RF_HD int64_t start(int64_t i) const { return by_out.div(i * in); }
  RF_HD int64_t end(int64_t i) const { return by_out.div((i + 1) * in + out - 1); }
  // The outputs whose bins hold input j: start(o) <= j < end(o) for o in [first, last].
  RF_HD int64_t first_holding(int64_t j) const { return by_in.div(j * out); }
  RF_HD int64_t last_holding(int64_t j) const {
    const int64_t o = by_in.div((j + 1) * out - 1);
    return o < out - 1 ? o : out - 1;
  }
};

// Linear index over (N, C, H, W) sizes -> its coordinates.
RF_HD inline void unravel4(int64_t i, int64_t C, int64_t H, int64_t W, int64_t& n, int64_t& c,
                           int64_t& h, int64_t& w) {
  w = i % W;
  i /= W;
  h = i % H;
  i /= H;
  c = i % C;
  n = i / C;
}

// The forward keeps each window's argmax, ih * W + iw, in `argmax` (one int32 per output, in
// the order x's layout walks y: Walk4), so that the backward reads one index per window holding an input cell
// instead of searching each window again (9 reads of x per window for 3x3).
// Offsets inside one (n, c) plane are of type I: int32_t where every plane's span fits it
// (in_plane_offsets_fit), since 64-bit multiplies are several instructions each on a GPU and
// these kernels do little else (ResNet-50's f32 max pooling took 4.4 ms of the H200's step,
// several times its bytes' time).
template <class T, class I>
struct MaxPoolForwardBody {
  Nchw<T> y;
  Nchw<const T> x;
  int32_t* argmax;
  PoolGeometry g;
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, oh, ow, bh, bw;
    g.out.unravel(i, n, c, oh, ow);
    const T* plane = &x.at(n, c, 0, 0);
    g.argmax_cell(plane, static_cast<I>(x.sh), static_cast<I>(x.sw), oh, ow, bh, bw);
    y.at(n, c, oh, ow) = plane[static_cast<I>(bh) * static_cast<I>(x.sh) + static_cast<I>(bw) * static_cast<I>(x.sw)];
    argmax[i] = static_cast<int32_t>(bh * g.W + bw);
  }
};

template <class T, class I>
struct MaxPoolBackwardBody {
  Nchw<T> dx;
  Nchw<const T> dy;
  const int32_t* argmax;
  PoolGeometry g;
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, ih, iw, oh0, oh1, ow0, ow1;
    g.in.unravel(i, n, c, ih, iw);
    g.rows_holding(ih, oh0, oh1);
    g.columns_holding(iw, ow0, ow1);
    const int32_t cell = static_cast<int32_t>(ih * g.W + iw);
    const int32_t* windows = argmax + g.out.ravel(n, c, 0, 0);
    const T* grads = &dy.at(n, c, 0, 0);
    const I ah = static_cast<I>(g.out.h_step()), aw = static_cast<I>(g.out.w_step());
    const I gh = static_cast<I>(dy.sh), gw = static_cast<I>(dy.sw);
    acc_t<T> sum = 0;
    for (I oh = static_cast<I>(oh0); oh <= static_cast<I>(oh1); ++oh)
      for (I ow = static_cast<I>(ow0); ow <= static_cast<I>(ow1); ++ow)
        if (windows[oh * ah + ow * aw] == cell) sum += load(grads[oh * gh + ow * gw]);
    dx.at(n, c, ih, iw) = store<T>(sum);
  }
};

template <class T>
struct AvgPoolForwardBody {
  Nchw<T> y;
  Nchw<const T> x;
  PoolGeometry g;
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, oh, ow, h0, h1, w0, w1, divisor;
    g.out.unravel(i, n, c, oh, ow);
    g.avg_window(oh, ow, h0, h1, w0, w1, divisor);
    acc_t<T> sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += load(x.at(n, c, ih, iw));
    y.at(n, c, oh, ow) = store<T>(sum / static_cast<acc_t<T>>(divisor));
  }
};

template <class T>
struct AvgPoolBackwardBody {
  Nchw<T> dx;
  Nchw<const T> dy;
  PoolGeometry g;
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, ih, iw, oh0, oh1, ow0, ow1;
    g.in.unravel(i, n, c, ih, iw);
    g.rows_holding(ih, oh0, oh1);
    g.columns_holding(iw, ow0, ow1);
    acc_t<T> sum = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        int64_t h0, h1, w0, w1, divisor;
        g.avg_window(oh, ow, h0, h1, w0, w1, divisor);
        if (ih >= h0 && ih < h1 && iw >= w0 && iw < w1)
          sum += load(dy.at(n, c, oh, ow)) / static_cast<acc_t<T>>(divisor);
      }
    dx.at(n, c, ih, iw) = store<T>(sum);
  }
};

template <class T>
struct AdaptiveAvgForwardBody {
  Nchw<T> y;
  Nchw<const T> x;
  AdaptiveBins rows, cols;
  Walk4 walk;  // y's
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, oh, ow;
    walk.unravel(i, n, c, oh, ow);
    const int64_t h0 = rows.start(oh), h1 = rows.end(oh);
    const int64_t w0 = cols.start(ow), w1 = cols.end(ow);
    acc_t<T> sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += load(x.at(n, c, ih, iw));
    y.at(n, c, oh, ow) = store<T>(sum / static_cast<acc_t<T>>((h1 - h0) * (w1 - w0)));
  }
};

template <class T>
struct AdaptiveAvgBackwardBody {
  Nchw<T> dx;
  Nchw<const T> dy;
  AdaptiveBins rows, cols;
  Walk4 walk;  // dx's
  RF_HD void operator()(int64_t i) const {
    int64_t n, c, ih, iw;
    walk.unravel(i, n, c, ih, iw);
    const int64_t oh0 = rows.first_holding(ih), oh1 = rows.last_holding(ih);
    const int64_t ow0 = cols.first_holding(iw), ow1 = cols.last_holding(iw);
    acc_t<T> sum = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t h0 = rows.start(oh), h1 = rows.end(oh);
        const int64_t w0 = cols.start(ow), w1 = cols.end(ow);
        if (ih >= h0 && ih < h1 && iw >= w0 && iw < w1)
          sum += load(dy.at(n, c, oh, ow)) / static_cast<acc_t<T>>((h1 - h0) * (w1 - w0));
      }
    dx.at(n, c, ih, iw) = store<T>(sum);
  }
};

// Whether every offset inside one (n, c) plane of each view, and of a dense view of its
// sizes in either layout (the backward's argmax has dy's), fits int32_t.
inline bool in_plane_offsets_fit(std::initializer_list<const View*> views) {
  for (const View* v : views) {
    const int64_t H = v->shape[2], W = v->shape[3];
    const int64_t span = (H - 1) * std::abs(v->strides[2]) + (W - 1) * std::abs(v->strides[3]);
    const int64_t dense = H * W * v->shape[1];  // channels-last's plane walk crosses every channel
    if (std::max(span, dense) >= INT32_MAX) return false;
  }
  return true;
}
// launch(int32_t{}) where in-plane offsets fit it, else launch(int64_t{}).
template <class Launch>
void with_plane_index(bool fits_int32, const Launch& launch) {
  if (fits_int32) launch(int32_t{});
  else launch(int64_t{});
}

// Checks x against y and p (as the reference does) and returns the geometry.
inline PoolGeometry pool_geometry(const View& x, const View& y, const Pool2dParams& p,
                                  const char* op) {
  check_rank(x, 4, op);
  check_rank(y, 4, op);
  check_floating(x, op);
  check_same_dtype(x, y, op);
  check(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op,
        "kernel and stride must be positive");
  check(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
        op, "pad should be at most half of the kernel size (PyTorch's rule)");
  const int64_t P = reference::pool_output_size(x.shape[2], p.kernel_h, p.pad_h, p.stride_h, p.ceil_mode);
  const int64_t Q = reference::pool_output_size(x.shape[3], p.kernel_w, p.pad_w, p.stride_w, p.ceil_mode);
  check(y.shape[0] == x.shape[0] && y.shape[1] == x.shape[1] && y.shape[2] == P &&
            y.shape[3] == Q,
        op, "y " + shape_str(y.shape) + " but pooling " + shape_str(x.shape) + " gives " +
                std::to_string(P) + "x" + std::to_string(Q));
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const bool last = walk_of(x).channels_last();
  // windows_holding divides at most max(H, W) + pad by a stride.
  const int64_t most = std::max(H + p.pad_h, W + p.pad_w);
  return {N, C, H, W, P, Q, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
          p.count_include_pad, Walk4(last, N, C, H, W), Walk4(last, N, C, P, Q), FastDiv(p.stride_h, most),
          FastDiv(p.stride_w, most)};
}

// Returns the argmax of every window (MaxPoolForwardBody), for max_pool2d_backward.
template <class Exec>
Workspace max_pool2d_forward(const Exec& exec, const View& y, const View& x, const Pool2dParams& p) {
  const PoolGeometry g = pool_geometry(x, y, p, "max_pool2d_forward");
  check(g.H * g.W <= INT32_MAX, "max_pool2d_forward",
        "an input plane of " + std::to_string(g.H * g.W) + " cells is over int32's range");
  Workspace argmax = Exec::workspace(static_cast<size_t>(std::max<int64_t>(y.numel(), 1)) * sizeof(int32_t));
  visit_floating(x.dtype, "max_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    with_plane_index(in_plane_offsets_fit({&x}), [&](auto index) {  // y is indexed in int64
      using I = decltype(index);
      exec.elementwise(y.numel(), MaxPoolForwardBody<T, I>{nchw<T>(y), nchw<const T>(x),
                                                           static_cast<int32_t*>(argmax.get()), g});
    });
  });
  return argmax;
}

template <class Exec>
void max_pool2d_backward(const Exec& exec, const View& dx, const View& dy, const View& x,
                         const Workspace& argmax, const Pool2dParams& p) {
  const PoolGeometry g = pool_geometry(x, dy, p, "max_pool2d_backward");
  check_same_shape(dx, x, "max_pool2d_backward");
  check_same_dtype(dx, x, "max_pool2d_backward");
  check(argmax != nullptr, "max_pool2d_backward", "no argmax from max_pool2d_forward of this table");
  visit_floating(x.dtype, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    // dy and the argmax (dy's sizes, dense) are read in I; dx is written in int64.
    with_plane_index(in_plane_offsets_fit({&dy}), [&](auto index) {
      using I = decltype(index);
      exec.elementwise(dx.numel(), MaxPoolBackwardBody<T, I>{nchw<T>(dx), nchw<const T>(dy),
                                                             static_cast<const int32_t*>(argmax.get()), g});
    });
  });
}

template <class Exec>
void avg_pool2d_forward(const Exec& exec, const View& y, const View& x, const Pool2dParams& p) {
  const PoolGeometry g = pool_geometry(x, y, p, "avg_pool2d_forward");
  visit_floating(x.dtype, "avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(y.numel(), AvgPoolForwardBody<T>{nchw<T>(y), nchw<const T>(x), g});
  });
}

template <class Exec>
void avg_pool2d_backward(const Exec& exec, const View& dx, const View& dy, const Pool2dParams& p) {
  const PoolGeometry g = pool_geometry(dx, dy, p, "avg_pool2d_backward");
  visit_floating(dx.dtype, "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(dx.numel(), AvgPoolBackwardBody<T>{nchw<T>(dx), nchw<const T>(dy), g});
  });
}

inline void check_adaptive(const View& big, const View& small, const char* op) {
  check_rank(big, 4, op);
  check_rank(small, 4, op);
  check_floating(big, op);
  check_same_dtype(big, small, op);
  check(big.shape[0] == small.shape[0] && big.shape[1] == small.shape[1], op,
        "N, C of " + shape_str(big.shape) + " and " + shape_str(small.shape) + " differ");
  check(small.shape[2] > 0 && small.shape[3] > 0, op, "output size must be positive");
}

template <class Exec>
void adaptive_avg_pool2d_forward(const Exec& exec, const View& y, const View& x) {
  check_adaptive(x, y, "adaptive_avg_pool2d_forward");
  visit_floating(x.dtype, "adaptive_avg_pool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(y.numel(), AdaptiveAvgForwardBody<T>{nchw<T>(y), nchw<const T>(x),
                                                          AdaptiveBins(x.shape[2], y.shape[2]),
                                                          AdaptiveBins(x.shape[3], y.shape[3]), walk_of(y)});
  });
}

template <class Exec>
void adaptive_avg_pool2d_backward(const Exec& exec, const View& dx, const View& dy) {
  check_adaptive(dx, dy, "adaptive_avg_pool2d_backward");
  visit_floating(dx.dtype, "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(dx.numel(), AdaptiveAvgBackwardBody<T>{nchw<T>(dx), nchw<const T>(dy),
                                                            AdaptiveBins(dx.shape[2], dy.shape[2]),
                                                            AdaptiveBins(dx.shape[3], dy.shape[3]), walk_of(dx)});
  });
}

template <class Exec>
void set_pool_kernels(Backend& b) {
  b.max_pool2d_forward = [](const View& y, const View& x, const Pool2dParams& p) -> Workspace {
    return max_pool2d_forward(Exec{}, y, x, p);
  };
  b.max_pool2d_backward = [](const View& dx, const View& dy, const View& x, const Workspace& ws,
                             const Pool2dParams& p) { max_pool2d_backward(Exec{}, dx, dy, x, ws, p); };
  b.avg_pool2d_forward = [](const View& y, const View& x, const Pool2dParams& p) {
    avg_pool2d_forward(Exec{}, y, x, p);
  };
  b.avg_pool2d_backward = [](const View& dx, const View& dy, const Pool2dParams& p) {
    avg_pool2d_backward(Exec{}, dx, dy, p);
  };
  b.adaptive_avg_pool2d_forward = [](const View& y, const View& x) {
    adaptive_avg_pool2d_forward(Exec{}, y, x);
  };
  b.adaptive_avg_pool2d_backward = [](const View& dx, const View& dy) {
    adaptive_avg_pool2d_backward(Exec{}, dx, dy);
  };
}

}  // namespace ringflow::simt
