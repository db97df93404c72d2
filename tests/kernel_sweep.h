// The kernel-table test harness: host buffers with any strides, seeded values, a closeness
// check that prints the first mismatches, and sweeps that run one table's kernels against
// reference_backend() over shapes with sizes 1, odd and prime, NCHW and channels-last.
// cpu_kernels_test runs the sweeps on the CPU table, simt_kernels_test on the CUDA
// backend's own kernels run on the host.
#pragma once

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::sweep {

enum class Layout { nchw, nhwc };

// A host buffer and a View on it. Strides may be given (transposes, broadcasts).
struct Buf {
  std::vector<unsigned char> mem;
  View v;
};


inline Shape layout_strides(const Shape& shape, Layout layout) {
  if (layout == Layout::nchw || shape.size() != 4) return contiguous_strides(shape);
  const int64_t C = shape[1], H = shape[2], W = shape[3];
  return {H * W * C, 1, W * C, C};
}

inline double get(const View& v, int64_t offset) {
  return visit_dtype(v.dtype, [&](auto t) {
    using T = decltype(t);
    return static_cast<double>(static_cast<float>(static_cast<const T*>(v.data)[offset]));
  });
}
inline void set(const View& v, int64_t offset, double value) {
  visit_dtype(v.dtype, [&](auto t) {
    using T = decltype(t);
    static_cast<T*>(v.data)[offset] = static_cast<T>(value);
  });
}

// Calls fn(index, offset) for every logical element of v.
inline void for_each(const View& v, const std::function<void(const Shape&, int64_t)>& fn) {
  if (v.numel() == 0) return;
  Shape idx(v.dim(), 0);
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < v.dim(); ++d) off += idx[d] * v.strides[d];
    fn(idx, off);
    int d = v.dim() - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

inline Buf make_strided(const Shape& shape, const Shape& strides, DType dt) {
  Buf b;
  int64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) span += (shape[d] - 1) * strides[d];
  b.mem.assign(static_cast<size_t>(std::max<int64_t>(span, 1)) * dtype_size(dt) + 64, 0);
  b.v.data = b.mem.data();
  b.v.dtype = dt;
  b.v.shape = shape;
  b.v.strides = strides;
  return b;
}

inline Buf make(const Shape& shape, DType dt, Layout layout = Layout::nchw) {
  return make_strided(shape, layout_strides(shape, layout), dt);
}

inline void randomize(const View& v, std::mt19937& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  for_each(v, [&](const Shape&, int64_t off) { set(v, off, u(rng)); });
}

inline Buf random(const Shape& shape, DType dt, Layout layout, std::mt19937& rng, double lo = -1,
           double hi = 1) {
  Buf b = make(shape, dt, layout);
  randomize(b.v, rng, lo, hi);
  return b;
}

// A fresh output like `like` (same shape, strides, dtype), prefilled with garbage.
inline Buf like(const Buf& like_buf) {
  Buf b = make_strided(like_buf.v.shape, like_buf.v.strides, like_buf.v.dtype);
  for_each(b.v, [&](const Shape&, int64_t off) { set(b.v, off, 7.25); });
  return b;
}

inline std::string idx_str(const Shape& idx) { return shape_str(idx); }

// |got - want| <= atol + rtol * |want| everywhere; prints the first mismatches.
inline bool close(const View& got, const View& want, double rtol, double atol, const std::string& what) {
  int bad = 0;
  int64_t count = 0;
  for_each(want, [&](const Shape& idx, int64_t off_w) {
    int64_t off_g = 0;
    for (int d = 0; d < got.dim(); ++d) off_g += idx[d] * got.strides[d];
    const double g = get(got, off_g), w = get(want, off_w);
    const bool ok = g == w || (std::isnan(g) && std::isnan(w)) ||
                    std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok) {
      if (bad < 5) {
        std::printf("  mismatch %s at %s: got %.7g reference %.7g\n", what.c_str(),
                    idx_str(idx).c_str(), g, w);
      }
      ++bad;
    }
    ++count;
  });
  if (bad) std::printf("  %s: %d of %lld elements differ\n", what.c_str(), bad, static_cast<long long>(count));
  return bad == 0;
}

// Tolerances: f32 relative 1e-4 plus an absolute part growing with the number of terms
// accumulated into each output; bf16 rounds every input and output to 8 bits, f16 to 11.
inline double rtol_of(DType dt) {
  return dt == DType::bf16 ? 2e-2 : dt == DType::f16 ? 4e-3 : 1e-4;
}
inline double atol_of(DType dt, double terms) {
  if (dt == DType::bf16) return 1e-2 * std::sqrt(terms) + 1e-2;
  if (dt == DType::f16) return 2e-3 * std::sqrt(terms) + 2e-3;
  return 2e-6 * terms + 1e-6;
}

// Elementwise results: one rounding of the output, plus float math functions' error.
inline double elementwise_rtol(DType dt) {
  return dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : rtol_of(dt);
}

inline const char* layout_name(Layout l) { return l == Layout::nchw ? "nchw" : "nhwc"; }


// ---------------------------------------------------------------- pooling
inline int64_t pool_out(int64_t H, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const int64_t num = H + 2 * p - k;
  int64_t P = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (ceil_mode && (P - 1) * s >= H + p) --P;
  return P;
}

struct ConvCase {
  int64_t N, C, K, H, W, R, S;
  Conv2dParams p;
  Layout lx, ly;
  DType dt;
  Layout lw = Layout::nchw;  // the weights'
};

inline std::string conv_name(const ConvCase& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "N%lld C%lld K%lld H%lld W%lld k%lldx%lld s%lld,%lld pad t%lld b%lld l%lld r%lld d%lld,%lld %s->%s %s",
                (long long)c.N, (long long)c.C, (long long)c.K, (long long)c.H, (long long)c.W,
                (long long)c.R, (long long)c.S, (long long)c.p.stride_h, (long long)c.p.stride_w,
                (long long)c.p.pad_top, (long long)c.p.pad_bottom, (long long)c.p.pad_left,
                (long long)c.p.pad_right, (long long)c.p.dilation_h, (long long)c.p.dilation_w,
                layout_name(c.lx), layout_name(c.ly), dtype_name(c.dt));
  return c.lw == Layout::nchw ? std::string(buf) : std::string(buf) + " w " + layout_name(c.lw);
}

inline bool conv_output(const ConvCase& c, int64_t& P, int64_t& Q) {
  const int64_t eh = (c.R - 1) * c.p.dilation_h + 1, ew = (c.S - 1) * c.p.dilation_w + 1;
  const int64_t hh = c.H + c.p.pad_top + c.p.pad_bottom - eh, ww = c.W + c.p.pad_left + c.p.pad_right - ew;
  if (hh < 0 || ww < 0) return false;
  P = hh / c.p.stride_h + 1;
  Q = ww / c.p.stride_w + 1;
  return true;
}

// Runs forward, backward-data and backward-weights(+bias) on k and the reference.
inline bool check_conv(const Backend& k, const ConvCase& c, std::mt19937& rng) {
  int64_t P, Q;
  if (!conv_output(c, P, Q)) return true;
  const std::string name = conv_name(c);
  Buf x = random({c.N, c.C, c.H, c.W}, c.dt, c.lx, rng);
  Buf w = random({c.K, c.C, c.R, c.S}, c.dt, c.lw, rng);
  Buf bias = random({c.K}, c.dt, Layout::nchw, rng);
  Buf dy = random({c.N, c.K, P, Q}, c.dt, c.ly, rng);
  Buf y = make({c.N, c.K, P, Q}, c.dt, c.ly);
  Buf y1 = like(y), y2 = like(y);
  k.conv2d_forward(y1.v, x.v, w.v, &bias.v, c.p);
  reference_backend().conv2d_forward(y2.v, x.v, w.v, &bias.v, c.p);
  bool ok = close(y1.v, y2.v, rtol_of(c.dt), atol_of(c.dt, double(c.C * c.R * c.S)), "conv fwd " + name);

  Buf dx1 = like(x), dx2 = like(x);
  k.conv2d_backward_data(dx1.v, dy.v, w.v, c.p);
  reference_backend().conv2d_backward_data(dx2.v, dy.v, w.v, c.p);
  ok &= close(dx1.v, dx2.v, rtol_of(c.dt), atol_of(c.dt, double(c.K * c.R * c.S)), "conv bwd data " + name);

  Buf dw1 = like(w), dw2 = like(w), db1 = like(bias), db2 = like(bias);
  k.conv2d_backward_weights(dw1.v, &db1.v, dy.v, x.v, c.p);
  reference_backend().conv2d_backward_weights(dw2.v, &db2.v, dy.v, x.v, c.p);
  ok &= close(dw1.v, dw2.v, rtol_of(c.dt), atol_of(c.dt, double(c.N * P * Q)), "conv bwd weights " + name);
  ok &= close(db1.v, db2.v, rtol_of(c.dt), atol_of(c.dt, double(c.N * P * Q)), "conv bwd bias " + name);
  return ok;
}

// Convolutions over kernel sizes, strides, dilations, asymmetric padding and layouts; with
// `large`, also a layer big enough for the CPU's chunked backward-weights.
inline bool sweep_conv(const Backend& k, const std::vector<DType>& dtypes, bool large) {
  std::mt19937 rng(1);
  const int64_t kernel_sizes[][2] = {{1, 1}, {3, 3}, {1, 7}, {7, 1}, {5, 5}};
  const int64_t Ns[] = {1, 3}, Cs[] = {1, 3, 16, 17}, Ks[] = {1, 16, 3, 17}, HWs[] = {1, 5, 7, 13};
  int cases = 0, failed = 0, variant = 0;
  for (DType dt : dtypes) {
    for (auto& ks : kernel_sizes) {
      for (int64_t stride : {1, 2}) {
        for (int64_t dil : {1, 2}) {
          for (int lay = 0; lay < 4; ++lay) {
            if (dt != DType::f32 && (lay == 1 || lay == 2 || dil == 2)) continue;  // keep 16 and 64 bits short
            ConvCase c;
            const int v = variant++;
            c.N = Ns[v % 2];
            c.C = Cs[v % 4];
            c.K = Ks[(v / 4) % 4];
            c.H = HWs[(v / 2) % 4] + (ks[0] > 1 ? 6 : 0);
            c.W = HWs[(v / 3) % 4] + (ks[1] > 1 ? 6 : 0);
            c.R = ks[0];
            c.S = ks[1];
            c.p.stride_h = c.p.stride_w = stride;
            c.p.dilation_h = c.p.dilation_w = dil;
            c.p.pad_top = (ks[0] / 2);
            c.p.pad_bottom = v % 3 == 0 ? 0 : ks[0] / 2 + (ks[0] > 1 ? 1 : 0);  // asymmetric
            c.p.pad_left = ks[1] / 2;
            c.p.pad_right = v % 2 == 0 ? ks[1] / 2 : 0;
            c.lx = (lay & 1) ? Layout::nhwc : Layout::nchw;
            c.ly = (lay & 2) ? Layout::nhwc : Layout::nchw;
            c.dt = dt;
            ++cases;
            if (!check_conv(k, c, rng)) ++failed;
          }
        }
      }
    }
  }
  // Sizes 1 and odd spatial sizes with 3x3, channels-last, explicitly (f32 and bf16: the
  // CPU's im2col backward-weights takes both).
  for (DType dt : dtypes) {
    if (dt != DType::f32 && dt != DType::bf16) continue;
    for (int64_t H : {1, 5, 7, 13}) {
      for (int64_t C : {1, 3, 16, 17}) {
        ConvCase c{3, C, 17, H, H, 3, 3, {}, Layout::nhwc, Layout::nhwc, dt};
        c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
        ++cases;
        if (!check_conv(k, c, rng)) ++failed;
      }
    }
    // Large enough that the im2col backward-weights (conv_gemm.cpp) runs in two chunks.
    if (large) {
      ConvCase c{dt == DType::bf16 ? 64 : 40, 512, 8, 4, 4, 3, 3, {}, Layout::nhwc, Layout::nhwc, dt};
      c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
      ++cases;
      if (!check_conv(k, c, rng)) ++failed;
      // ResNet's downsampling shape: stride 2 to a 16x16 output (bf16 without AMX: im2col).
      ConvCase s{2, 32, 48, 32, 32, 3, 3, {}, Layout::nhwc, Layout::nhwc, dt};
      s.p.stride_h = s.p.stride_w = 2;
      s.p.pad_top = s.p.pad_bottom = s.p.pad_left = s.p.pad_right = 1;
      ++cases;
      if (!check_conv(k, s, rng)) ++failed;
    }
  }
  MESSAGE(cases << " conv cases");
  return failed == 0;
}

// Max and average pooling with ceil_mode and count_include_pad.
inline bool sweep_pooling(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(3);
  const int64_t cfg[][3] = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1}, {2, 1, 1}, {3, 3, 1}, {5, 2, 2}};
  int failed = 0, cases = 0, v = 0;
  for (DType dt : dtypes) {
    for (auto& c : cfg) {
      for (bool ceil_mode : {false, true}) {
        for (bool cip : {false, true}) {
          for (Layout lay : {Layout::nchw, Layout::nhwc}) {
            for (int64_t H : {1, 5, 7, 13}) {
              const int64_t N = (v % 2) ? 3 : 1, C = std::array<int64_t, 4>{1, 3, 16, 17}[v % 4];
              const int64_t W = std::array<int64_t, 4>{5, 13, 7, 6}[(v / 3) % 4];
              ++v;
              Pool2dParams p;
              p.kernel_h = p.kernel_w = c[0];
              p.stride_h = p.stride_w = c[1];
              p.pad_h = p.pad_w = c[2];
              p.ceil_mode = ceil_mode;
              p.count_include_pad = cip;
              if (H + 2 * p.pad_h < p.kernel_h || W + 2 * p.pad_w < p.kernel_w) continue;
              const int64_t P = pool_out(H, c[0], c[1], c[2], ceil_mode), Q = pool_out(W, c[0], c[1], c[2], ceil_mode);
              char name[160];
              std::snprintf(name, sizeof name, "pool N%lld C%lld H%lld W%lld k%lld s%lld p%lld ceil%d cip%d %s %s",
                            (long long)N, (long long)C, (long long)H, (long long)W, (long long)c[0],
                            (long long)c[1], (long long)c[2], ceil_mode, cip, layout_name(lay), dtype_name(dt));
              Buf x = random({N, C, H, W}, dt, lay, rng);
              Buf dy = random({N, C, P, Q}, dt, lay, rng);
              Buf y1 = make({N, C, P, Q}, dt, lay), y2 = like(y1);
              const double terms = double(c[0] * c[0]);
              Workspace ws1 = k.max_pool2d_forward(y1.v, x.v, p);
              Workspace ws2 = reference_backend().max_pool2d_forward(y2.v, x.v, p);
              bool ok = close(y1.v, y2.v, 0, 0, std::string("max fwd ") + name);
              Buf dx1 = like(x), dx2 = like(x);
              k.max_pool2d_backward(dx1.v, dy.v, x.v, ws1, p);
              reference_backend().max_pool2d_backward(dx2.v, dy.v, x.v, ws2, p);
              ok &= close(dx1.v, dx2.v, rtol_of(dt), atol_of(dt, terms), std::string("max bwd ") + name);
              k.avg_pool2d_forward(y1.v, x.v, p);
              reference_backend().avg_pool2d_forward(y2.v, x.v, p);
              ok &= close(y1.v, y2.v, rtol_of(dt), atol_of(dt, terms), std::string("avg fwd ") + name);
              k.avg_pool2d_backward(dx1.v, dy.v, p);
              reference_backend().avg_pool2d_backward(dx2.v, dy.v, p);
              ok &= close(dx1.v, dx2.v, rtol_of(dt), atol_of(dt, terms), std::string("avg bwd ") + name);
              ++cases;
              if (!ok) ++failed;
            }
          }
        }
      }
    }
  }
  // Adaptive average pooling: bins that tile the input evenly (the CPU's oneDNN path) and
  // uneven ones (PyTorch's overlapping bins).
  const int64_t sizes[][4] = {{4, 4, 1, 1}, {8, 6, 2, 3}, {7, 5, 3, 2}, {6, 6, 6, 6}, {5, 9, 5, 3}};
  for (DType dt : dtypes) {
    for (auto& z : sizes) {
      for (Layout lay : {Layout::nchw, Layout::nhwc}) {
        const int64_t N = 3, C = 17;
        const std::string name = "adaptive " + shape_str({z[0], z[1]}) + " -> " +
                                 shape_str({z[2], z[3]}) + " " + layout_name(lay) + " " + dtype_name(dt);
        Buf x = random({N, C, z[0], z[1]}, dt, lay, rng), dy = random({N, C, z[2], z[3]}, dt, lay, rng);
        Buf y1 = make({N, C, z[2], z[3]}, dt, lay), y2 = like(y1), dx1 = like(x), dx2 = like(x);
        const double terms = double(z[0] * z[1]);
        k.adaptive_avg_pool2d_forward(y1.v, x.v);
        reference_backend().adaptive_avg_pool2d_forward(y2.v, x.v);
        bool ok = close(y1.v, y2.v, rtol_of(dt), atol_of(dt, terms), "fwd " + name);
        k.adaptive_avg_pool2d_backward(dx1.v, dy.v);
        reference_backend().adaptive_avg_pool2d_backward(dx2.v, dy.v);
        ok &= close(dx1.v, dx2.v, rtol_of(dt), atol_of(dt, terms), "bwd " + name);
        ++cases;
        if (!ok) ++failed;
      }
    }
  }
  MESSAGE(cases << " pooling cases");
  return failed == 0;
}

// ---------------------------------------------------------------- batch norm
// Batch norm train, eval and backward, 2-D and 4-D, with and without affine.
inline bool sweep_batch_norm(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(4);
  int failed = 0, cases = 0, v = 0;
  const double eps = 1e-5;
  for (DType dt : dtypes) {
    for (int64_t C : {1, 3, 16, 17}) {
      for (int64_t H : {1, 5, 7, 13}) {
        for (Layout lay : {Layout::nchw, Layout::nhwc}) {
          for (int affine = 0; affine < 2; ++affine) {
            const int64_t N = (v++ % 2) ? 3 : 1, W = H == 1 ? 1 : H + 2;
            if (N * H * W == 1) continue;  // a single element per channel: variance 0
            const bool two_d = H == 1 && lay == Layout::nchw && v % 3 == 0;
            const Shape shape = two_d ? Shape{N, C} : Shape{N, C, H, W};
            Buf x = random(shape, dt, lay, rng), dy = random(shape, dt, lay, rng);
            Buf g = random({C}, DType::f32, Layout::nchw, rng, 0.5, 1.5), b = random({C}, DType::f32, Layout::nchw, rng);
            const View* gp = affine ? &g.v : nullptr;
            const View* bp = affine ? &b.v : nullptr;
            Buf y1 = like(x), y2 = like(x);
            Buf m1 = make({C}, DType::f32), m2 = make({C}, DType::f32), v1 = make({C}, DType::f32), v2 = make({C}, DType::f32);
            const double terms = double(x.v.numel() / C);
            std::string name = shape_str(shape) + " " + layout_name(lay) + " affine" + std::to_string(affine) + " " + dtype_name(dt);
            k.batch_norm_forward_train(y1.v, m1.v, v1.v, x.v, gp, bp, eps);
            reference_backend().batch_norm_forward_train(y2.v, m2.v, v2.v, x.v, gp, bp, eps);
            bool ok = close(y1.v, y2.v, rtol_of(dt), atol_of(dt, terms) * 10, "bn train y " + name);
            ok &= close(m1.v, m2.v, 1e-4, 1e-5, "bn mean " + name);
            ok &= close(v1.v, v2.v, 1e-4, 1e-5, "bn var " + name);
            k.batch_norm_forward_eval(y1.v, x.v, m2.v, v2.v, gp, bp, eps);
            reference_backend().batch_norm_forward_eval(y2.v, x.v, m2.v, v2.v, gp, bp, eps);
            ok &= close(y1.v, y2.v, rtol_of(dt), atol_of(dt, 1) * 10, "bn eval " + name);
            Buf dx1 = like(x), dx2 = like(x), dg1 = make({C}, DType::f32), dg2 = make({C}, DType::f32),
                db1 = make({C}, DType::f32), db2 = make({C}, DType::f32);
            k.batch_norm_backward(dx1.v, affine ? &dg1.v : nullptr, affine ? &db1.v : nullptr, dy.v,
                                      x.v, m2.v, v2.v, gp, eps);
            reference_backend().batch_norm_backward(dx2.v, affine ? &dg2.v : nullptr, affine ? &db2.v : nullptr, dy.v,
                                      x.v, m2.v, v2.v, gp, eps);
            // dx involves two reductions over N*H*W and a 1/sigma that is large for
            // nearly constant channels: compare with the tolerance scaled accordingly.
            ok &= close(dx1.v, dx2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 100, "bn bwd dx " + name);
            if (affine) {
              ok &= close(dg1.v, dg2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 10, "bn bwd dgamma " + name);
              ok &= close(db1.v, db2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 10, "bn bwd dbeta " + name);
            }
            ++cases;
            if (!ok) ++failed;
          }
        }
      }
    }
  }
  MESSAGE(cases << " batch norm cases");
  return failed == 0;
}

// Batch norm fused with relu(y + residual) (the residual in its own layout, or none), forward
// and backward with dresidual, and the running statistics' update (momentum and cumulative),
// against the reference. Shapes keep every value away from relu's kink by a margin.
inline bool sweep_batch_norm_relu(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(14);
  int failed = 0, cases = 0;
  const double eps = 1e-5;
  for (DType dt : dtypes) {
    for (const Shape& shape : {Shape{3, 16, 5, 7}, Shape{2, 17, 1, 1}, Shape{4, 3, 6, 5}, Shape{2, 5, 4, 8}, Shape{5, 8}}) {
      for (Layout lay : {Layout::nchw, Layout::nhwc}) {
        for (int residual = 0; residual < 3; ++residual) {  // none, x's layout, the other layout
          const int64_t C = shape[1];
          const Layout other = lay == Layout::nchw ? Layout::nhwc : Layout::nchw;
          Buf x = random(shape, dt, lay, rng), dy = random(shape, dt, lay, rng);
          Buf r = random(shape, dt, residual == 2 ? other : lay, rng);
          Buf g = random({C}, DType::f32, Layout::nchw, rng, 0.5, 1.5), b = random({C}, DType::f32, Layout::nchw, rng);
          const View* rp = residual ? &r.v : nullptr;
          Buf y1 = like(x), y2 = like(x);
          Buf m1 = make({C}, DType::f32), m2 = make({C}, DType::f32), v1 = make({C}, DType::f32), v2 = make({C}, DType::f32);
          const double terms = double(x.v.numel() / C);
          const std::string name = shape_str(shape) + " " + layout_name(lay) + " residual" + std::to_string(residual) +
                                   " " + dtype_name(dt);
          k.batch_norm_relu_forward_train(y1.v, m1.v, v1.v, x.v, &g.v, &b.v, rp, eps);
          reference_backend().batch_norm_relu_forward_train(y2.v, m2.v, v2.v, x.v, &g.v, &b.v, rp, eps);
          bool ok = close(y1.v, y2.v, rtol_of(dt), atol_of(dt, terms) * 10, "bn+relu y " + name);
          ok &= close(m1.v, m2.v, 1e-4, 1e-5, "bn+relu mean " + name);
          ok &= close(v1.v, v2.v, 1e-4, 1e-5, "bn+relu var " + name);
          // The backward reads the relu's mask from y: both sides get the reference's y.
          Buf dx1 = like(x), dx2 = like(x), dr1 = like(x), dr2 = like(x);
          Buf dg1 = make({C}, DType::f32), dg2 = make({C}, DType::f32), db1 = make({C}, DType::f32),
              db2 = make({C}, DType::f32);
          k.batch_norm_relu_backward(dx1.v, residual ? &dr1.v : nullptr, &dg1.v, &db1.v, dy.v, y2.v, x.v, m2.v,
                                     v2.v, &g.v, eps);
          reference_backend().batch_norm_relu_backward(dx2.v, residual ? &dr2.v : nullptr, &dg2.v, &db2.v, dy.v,
                                                       y2.v, x.v, m2.v, v2.v, &g.v, eps);
          ok &= close(dx1.v, dx2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 100, "bn+relu bwd dx " + name);
          ok &= close(dg1.v, dg2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 10, "bn+relu bwd dgamma " + name);
          ok &= close(db1.v, db2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 10, "bn+relu bwd dbeta " + name);
          if (residual) ok &= close(dr1.v, dr2.v, 0, 0, "bn+relu bwd dresidual " + name);
          ++cases;
          if (!ok) ++failed;
        }
      }
    }
  }
  // Running statistics: momentum 0.1 and the cumulative average (momentum < 0, counted).
  for (double momentum : {0.1, -1.0}) {
    const int64_t C = 7, count = 40;
    Buf mean = random({C}, DType::f32, Layout::nchw, rng), var = random({C}, DType::f32, Layout::nchw, rng, 0.1, 2);
    Buf rm1 = random({C}, DType::f32, Layout::nchw, rng), rv1 = random({C}, DType::f32, Layout::nchw, rng, 0.5, 1.5);
    Buf rm2 = like(rm1), rv2 = like(rv1);
    reference_backend().copy(rm2.v, rm1.v);
    reference_backend().copy(rv2.v, rv1.v);
    int64_t n1 = 4, n2 = 4;
    View nb1 = make({}, DType::i64).v, nb2 = nb1;
    nb1.data = &n1;
    nb2.data = &n2;
    k.batch_norm_update_stats(&rm1.v, &rv1.v, &nb1, mean.v, var.v, momentum, count);
    reference_backend().batch_norm_update_stats(&rm2.v, &rv2.v, &nb2, mean.v, var.v, momentum, count);
    bool ok = n1 == 5 && n2 == 5;
    ok &= close(rm1.v, rm2.v, 1e-6, 1e-7, "running mean, momentum " + std::to_string(momentum));
    ok &= close(rv1.v, rv2.v, 1e-6, 1e-7, "running var, momentum " + std::to_string(momentum));
    ++cases;
    if (!ok) ++failed;
  }
  MESSAGE(cases << " fused batch norm cases");
  return failed == 0;
}

// ---------------------------------------------------------------- softmax
// Softmax and log-softmax, forward and backward, along every dim.
inline bool sweep_softmax(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(5);
  int failed = 0, cases = 0;
  const Shape shapes[] = {{1, 1}, {3, 17}, {5, 1000}, {1, 5, 7}, {3, 16, 5, 7}};
  for (DType dt : dtypes) {
    for (const Shape& s : shapes) {
      for (Layout lay : {Layout::nchw, Layout::nhwc}) {
        if (lay == Layout::nhwc && s.size() != 4) continue;
        for (int64_t dim = 0; dim < static_cast<int64_t>(s.size()); ++dim) {
          for (bool log : {false, true}) {
            Buf x = random(s, dt, lay, rng, -3, 3), dy = random(s, dt, lay, rng);
            Buf y1 = like(x), y2 = like(x), dx1 = like(x), dx2 = like(x);
            std::string name = shape_str(s) + " dim " + std::to_string(dim) + (log ? " log " : " ") +
                               layout_name(lay) + " " + dtype_name(dt);
            k.softmax_forward(y1.v, x.v, dim, log);
            reference_backend().softmax_forward(y2.v, x.v, dim, log);
            bool ok = close(y1.v, y2.v, rtol_of(dt), atol_of(dt, 1) * 10, "softmax fwd " + name);
            k.softmax_backward(dx1.v, dy.v, y2.v, dim, log);
            reference_backend().softmax_backward(dx2.v, dy.v, y2.v, dim, log);
            ok &= close(dx1.v, dx2.v, rtol_of(dt), atol_of(dt, double(s[dim])) * 10, "softmax bwd " + name);
            ++cases;
            if (!ok) ++failed;
          }
        }
      }
    }
  }
  MESSAGE(cases << " softmax cases");
  return failed == 0;
}

// ---------------------------------------------------------------- elementwise
// Operand layouts for elementwise tests, all over out's shape (N, C, H, W).
enum class Operand { same, channel, scalar, transposed };

inline Buf elementwise_operand(const Shape& s, Layout lay, Operand kind, std::mt19937& rng, double lo,
                               double hi, DType dt = DType::f32) {
  Buf b;
  switch (kind) {
    case Operand::same: return random(s, dt, lay, rng, lo, hi);
    case Operand::channel: b = make_strided(s, {0, 1, 0, 0}, dt); break;
    case Operand::scalar: b = make_strided(s, {0, 0, 0, 0}, dt); break;
    case Operand::transposed: b = make_strided(s, {s[1] * s[2] * s[3], s[2] * s[3], 1, s[2]}, dt); break;
  }
  randomize(b.v, rng, lo, hi);
  return b;
}

// Unary, binary and where over same-layout, transposed, per-channel and scalar operands.
inline bool sweep_elementwise(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(6);
  int failed = 0, cases = 0;
  const Shape shapes[] = {{1, 1, 1, 1}, {3, 17, 5, 7}, {2, 16, 13, 13}, {64, 64, 8, 8}};
  for (DType dt : dtypes) {
  const double rtol = elementwise_rtol(dt), atol = dt == DType::f32 || dt == DType::f64 ? rtol / 10 : rtol;
  for (const Shape& s : shapes) {
    for (Layout lay : {Layout::nchw, Layout::nhwc}) {
      const std::string base = shape_str(s) + " " + layout_name(lay) + " " + dtype_name(dt);
      for (UnaryOp op : {UnaryOp::neg, UnaryOp::exp, UnaryOp::log, UnaryOp::sqrt, UnaryOp::relu,
                         UnaryOp::abs, UnaryOp::sigmoid, UnaryOp::tanh}) {
        const bool positive = op == UnaryOp::log || op == UnaryOp::sqrt;
        for (Operand kind : {Operand::same, Operand::transposed}) {
          Buf in = elementwise_operand(s, lay, kind, rng, positive ? 0.1 : -2, 2, dt);
          Buf o1 = make(s, dt, lay), o2 = like(o1);
          k.unary(op, o1.v, in.v);
          reference_backend().unary(op, o2.v, in.v);
          ++cases;
          if (!close(o1.v, o2.v, rtol, atol, std::string("unary ") + unary_op_name(op) + " " + base)) ++failed;
        }
      }
      for (int bop = 0; bop <= static_cast<int>(BinaryOp::relu_backward); ++bop) {
        const BinaryOp op = static_cast<BinaryOp>(bop);
        for (Operand kb : {Operand::same, Operand::channel, Operand::scalar, Operand::transposed}) {
          for (bool swap : {false, true}) {
            const bool positive = op == BinaryOp::pow;
            Buf a = elementwise_operand(s, lay, swap ? kb : Operand::same, rng, positive ? 0.1 : -2, 2, dt);
            Buf b = elementwise_operand(s, lay, swap ? Operand::same : kb, rng, -2, 2, dt);
            Buf o1 = make(s, dt, lay), o2 = like(o1);
            k.binary(op, o1.v, a.v, b.v);
            reference_backend().binary(op, o2.v, a.v, b.v);
            ++cases;
            if (!close(o1.v, o2.v, rtol, atol, std::string("binary ") + binary_op_name(op) + " " + base +
                                                   " kind " + std::to_string(int(kb)) + " swap " + std::to_string(swap))) {
              ++failed;
            }
          }
        }
      }
      Buf cond = make(s, DType::f32, lay);
      std::bernoulli_distribution coin(0.5);
      for_each(cond.v, [&](const Shape&, int64_t off) { set(cond.v, off, coin(rng) ? 1.0 : 0.0); });
      Buf a = random(s, dt, lay, rng), b = elementwise_operand(s, lay, Operand::channel, rng, -1, 1, dt);
      Buf o1 = make(s, dt, lay), o2 = like(o1);
      k.where(o1.v, cond.v, a.v, b.v);
      reference_backend().where(o2.v, cond.v, a.v, b.v);
      ++cases;
      if (!close(o1.v, o2.v, 0, 0, "where " + base)) ++failed;
    }
  }
  }
  MESSAGE(cases << " elementwise cases");
  return failed == 0;
}

// copy between layouts and dtypes, and fill.
inline bool sweep_copy(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(7);
  int failed = 0;
  for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{3, 17, 5, 7}, Shape{8, 64, 16, 16}}) {
    for (DType from : dtypes) {
      for (DType to : dtypes) {
        for (Layout lf : {Layout::nchw, Layout::nhwc}) {
          for (Layout lt : {Layout::nchw, Layout::nhwc}) {
            Buf src = random(s, from, lf, rng, -100, 100);
            Buf d1 = make(s, to, lt), d2 = like(d1);
            k.copy(d1.v, src.v);
            reference_backend().copy(d2.v, src.v);
            if (!close(d1.v, d2.v, 0, 0, shape_str(s) + " copy " + dtype_name(from) + "->" + dtype_name(to) + " " +
                                             layout_name(lf) + "->" + layout_name(lt))) {
              ++failed;
            }
          }
        }
      }
      Buf f1 = make(s, from, Layout::nhwc), f2 = like(f1);
      k.fill(f1.v, 3.5);
      reference_backend().fill(f2.v, 3.5);
      if (!close(f1.v, f2.v, 0, 0, "fill " + shape_str(s) + " " + dtype_name(from))) ++failed;
    }
  }
  return failed == 0;
}

// sum, mean and max over sets of dims of NCHW and NHWC tensors.
inline bool sweep_reduce(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(8);
  int failed = 0, cases = 0;
  const std::vector<std::vector<int>> dim_sets = {{0, 1, 2, 3}, {3}, {0, 2, 3}, {0}, {1}, {2, 3}, {1, 2, 3}};
  for (DType dt : dtypes) {
  for (const Shape& s : {Shape{1, 1, 1, 1}, Shape{3, 17, 5, 7}, Shape{64, 64, 8, 8}}) {
    for (Layout lay : {Layout::nchw, Layout::nhwc}) {
      for (const auto& dims : dim_sets) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
          Buf in = random(s, dt, lay, rng);
          Shape os = s;
          for (int d : dims) os[d] = 1;
          Buf o1 = make(os, dt), o2 = like(o1);
          k.reduce(op, o1.v, in.v);
          reference_backend().reduce(op, o2.v, in.v);
          std::string name = std::string(reduce_op_name(op)) + " " + shape_str(s) + " " + layout_name(lay) +
                             " over " + std::to_string(dims.size()) + " dims from " + std::to_string(dims[0]) + " " + dtype_name(dt);
          ++cases;
          const double terms = double(in.v.numel() / o1.v.numel());
          const bool wide = dt == DType::f32 || dt == DType::f64;
          if (!close(o1.v, o2.v, wide ? 1e-5 : rtol_of(dt), wide ? 1e-5 : atol_of(dt, terms), name)) ++failed;
        }
      }
    }
  }
  }
  // 2-D: per-column sums (bias gradient of a linear layer) and per-row.
  for (int dim : {0, 1}) {
    Buf in = random({257, 31}, DType::f32, Layout::nchw, rng);
    Buf o1 = make(dim == 0 ? Shape{1, 31} : Shape{257, 1}, DType::f32), o2 = like(o1);
    k.reduce(ReduceOp::sum, o1.v, in.v);
    reference_backend().reduce(ReduceOp::sum, o2.v, in.v);
    ++cases;
    if (!close(o1.v, o2.v, 1e-5, 1e-5, "sum 2-D dim " + std::to_string(dim))) ++failed;
  }
  MESSAGE(cases << " reduce cases");
  return failed == 0;
}


// Fused SGD (momentum, dampening, Nesterov, weight decay, first step) and Adam/AdamW steps
// over lists of parameters with sizes 0, 1, odd and past one chunk, longer than one launch
// takes (kMaxSlots 40 on the GPU).
inline bool sweep_optimizers(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(9);
  int failed = 0, cases = 0;
  const int64_t sizes[] = {1, 0, 7, 4099, 33, 17000, 2, 64};
  for (DType dt : dtypes) {
    for (int n_slots : {1, 8, 45, 530}) {  // 530: more than one launch's table
      // Each parameter: param, grad, two states, for each table.
      std::vector<Buf> mine, theirs;
      std::vector<OptimizerSlot> a, b;
      for (int i = 0; i < n_slots; ++i) {
        const int64_t n = n_slots > 100 ? 1 + i % 7 : sizes[i % 8] + i;
        OptimizerSlot sa, sb;
        Buf bufs[4];
        for (int j = 0; j < 4; ++j) bufs[j] = random({n}, dt, Layout::nchw, rng, j == 3 ? 0 : -1, 1);
        for (int j = 0; j < 4; ++j) {
          Buf copy = make({n}, dt);
          std::memcpy(copy.mem.data(), bufs[j].mem.data(), bufs[j].mem.size());
          theirs.push_back(std::move(copy));
          mine.push_back(std::move(bufs[j]));
        }
        const size_t base = mine.size() - 4;
        sa = {mine[base].v.data, mine[base + 1].v.data, {mine[base + 2].v.data, mine[base + 3].v.data}, n};
        sb = {theirs[base].v.data, theirs[base + 1].v.data, {theirs[base + 2].v.data, theirs[base + 3].v.data}, n};
        a.push_back(sa);
        b.push_back(sb);
      }
      const auto compare = [&](const std::string& what) {
        bool ok = true;
        for (size_t i = 0; i < mine.size(); ++i)
          ok &= close(mine[i].v, theirs[i].v, rtol_of(dt), atol_of(dt, 4),
                      what + " " + dtype_name(dt) + " buffer " + std::to_string(i));
        ++cases;
        if (!ok) ++failed;
      };
      for (int variant = 0; variant < 4; ++variant) {
        SgdStep h{0.1, variant == 0 ? 0.0 : 0.9, variant == 2 ? 0.3 : 0.0, variant == 1 ? 0.0 : 1e-2,
                  variant == 3, /*first=*/variant == 1, /*scale=*/{}};
        std::vector<OptimizerSlot> sa = a, sb = b;
        if (h.momentum == 0)
          for (auto* v : {&sa, &sb})
            for (OptimizerSlot& s : *v) s.state[0] = nullptr;
        k.sgd_step(dt, sa, h);
        reference_backend().sgd_step(dt, sb, h);
        compare("sgd variant " + std::to_string(variant));
      }
      for (bool decoupled : {false, true}) {
        for (double t : {1.0, 7.0}) {
          const AdamStep h{1e-2, 0.9, 0.999, 1e-8, 0.05, decoupled, 1e-2 / (1 - std::pow(0.9, t)),
                           std::sqrt(1 - std::pow(0.999, t)), /*scale=*/{}};
          k.adam_step(dt, a, h);
          reference_backend().adam_step(dt, b, h);
          compare(std::string(decoupled ? "adamw" : "adam") + " t " + std::to_string(t));
        }
      }
      // The grad scaler's unscale and check (where the table has it), on the gradients (the
      // slots' param for it); an inf, then a NaN, planted in the last gradient sets found_inf,
      // which stays set.
      for (int plant = 0; k.unscale_grads && plant < 3; ++plant) {
        std::vector<OptimizerSlot> ga, gb;
        for (size_t i = 0; i < a.size(); ++i) {
          ga.push_back({const_cast<void*>(a[i].grad), nullptr, {nullptr, nullptr}, a[i].numel});
          gb.push_back({const_cast<void*>(b[i].grad), nullptr, {nullptr, nullptr}, b[i].numel});
        }
        if (plant > 0) {
          const double bad = plant == 1 ? std::numeric_limits<double>::infinity() : std::nan("");
          Buf* last[2] = {&mine[mine.size() - 3], &theirs[theirs.size() - 3]};
          for (Buf* g : last) set(g->v, g->v.numel() - 1, bad);
        }
        float inv = 0.25f, found_a = plant == 2 ? 1.0f : 0.0f, found_b = found_a;
        View iv = make({}, DType::f32).v, fa = iv, fb = iv;
        iv.data = &inv;
        fa.data = &found_a;
        fb.data = &found_b;
        k.unscale_grads(dt, ga, iv, fa);
        reference_backend().unscale_grads(dt, gb, iv, fb);
        bool ok = found_a == (plant ? 1.0f : 0.0f) && found_b == found_a;
        if (plant == 0) {
          compare("unscale");
        } else {
          ++cases;
          if (!ok) ++failed;
        }
        if (!ok) MESSAGE("unscale found_inf " << found_a << " vs " << found_b << " plant " << plant);
      }
    }
  }
  MESSAGE(cases << " optimizer cases");
  return failed == 0;
}

// The grad scaler's fused step (a table with check_scaled_grads): check_scaled_grads, then the
// SGD or Adam step with a LossScale, against unscale_grads then the plain step. On one table
// the two give the same bits (params and states); the table's fused step is close to the
// reference's; the check leaves the gradients as they were; a set found_inf leaves everything.
inline bool sweep_scaled_optimizers(const Backend& k, const std::vector<DType>& dtypes) {
  std::mt19937 rng(10);
  int failed = 0, cases = 0;
  // Inverse scales whose products round in 16 bits (0.3), and an exact one (2^-10).
  const float invs[] = {0.3f, 1.0f / 1024};
  const std::vector<int64_t> sizes = {1, 7, 4099, 33, 17000, 2};
  const auto fail = [&](bool ok, const std::string& what) {
    ++cases;
    if (!ok) {
      ++failed;
      MESSAGE("scaled step: " << what);
    }
  };
  for (DType dt : dtypes) {
    // One set of parameters (param, grad, two states each), copied for every run.
    std::vector<std::array<Buf, 4>> base;
    for (int64_t n : sizes) {
      std::array<Buf, 4> t;
      for (int j = 0; j < 4; ++j) t[j] = random({n}, dt, Layout::nchw, rng, j == 3 ? 0 : -1, 1);
      base.push_back(std::move(t));
    }
    const auto copy = [&] {
      std::vector<std::array<Buf, 4>> c;
      for (const auto& t : base) {
        std::array<Buf, 4> d;
        for (int j = 0; j < 4; ++j) {
          d[j] = make(t[j].v.shape, dt);
          std::memcpy(d[j].mem.data(), t[j].mem.data(), t[j].mem.size());
        }
        c.push_back(std::move(d));
      }
      return c;
    };
    const auto slots = [](std::vector<std::array<Buf, 4>>& c, bool grads_only) {
      std::vector<OptimizerSlot> out;
      for (auto& t : c)
        out.push_back(grads_only ? OptimizerSlot{t[1].v.data, nullptr, {nullptr, nullptr}, t[1].v.numel()}
                                 : OptimizerSlot{t[0].v.data, t[1].v.data, {t[2].v.data, t[3].v.data}, t[0].v.numel()});
      return out;
    };
    // Equal bytes in buffer j of every parameter (all j but the grads when `skip_grads`).
    const auto same = [](const std::vector<std::array<Buf, 4>>& a, const std::vector<std::array<Buf, 4>>& b,
                         bool skip_grads) {
      for (size_t i = 0; i < a.size(); ++i)
        for (int j = 0; j < 4; ++j)
          if ((!skip_grads || j != 1) && a[i][j].mem != b[i][j].mem) return false;
      return true;
    };
    const auto near = [&](const std::vector<std::array<Buf, 4>>& a, const std::vector<std::array<Buf, 4>>& b,
                          const std::string& what) {
      bool ok = true;
      for (size_t i = 0; i < a.size(); ++i)
        for (int j : {0, 2, 3}) ok &= close(a[i][j].v, b[i][j].v, rtol_of(dt), atol_of(dt, 4), what);
      return ok;
    };
    for (const float inv : invs) {
      const View iv{const_cast<float*>(&inv), DType::f32, {}, {}};
      // Rules: SGD (momentum and weight decay; its first step), Adam, AdamW.
      for (int rule = 0; rule < 4; ++rule) {
        const std::string what = std::string(dtype_name(dt)) + " inv " + std::to_string(inv) + " rule " +
                                 std::to_string(rule);
        // step(table, slots, scale): the rule with that LossScale.
        const auto step = [&](const Backend& t, std::vector<OptimizerSlot> sl, LossScale scale) {
          if (rule < 2) {
            SgdStep h{0.1, 0.9, 0.0, 1e-2, false, /*first=*/rule == 1, scale};
            t.sgd_step(dt, sl, h);
          } else {
            const AdamStep h{1e-2, 0.9, 0.999, 1e-8, 0.05, /*decoupled=*/rule == 3, 1e-2 / (1 - std::pow(0.9, 3)),
                             std::sqrt(1 - std::pow(0.999, 3)), scale};
            t.adam_step(dt, sl, h);
          }
        };
        // Per table: unscale then step (u), check then the scaled step (f).
        std::vector<std::array<Buf, 4>> results[2][2];  // [table: k, reference][u, f]
        for (int table = 0; table < 2; ++table) {
          const Backend& t = table == 0 ? k : reference_backend();
          float found_u = 0, found_f = 0;
          const View fu{&found_u, DType::f32, {}, {}}, ff{&found_f, DType::f32, {}, {}};
          auto u = copy(), f = copy();
          std::vector<OptimizerSlot> gu = slots(u, true), gf = slots(f, true);
          t.unscale_grads(dt, gu, iv, fu);
          step(t, slots(u, false), {});
          t.check_scaled_grads(dt, gf, iv, ff);
          fail(found_u == 0 && found_f == 0, what + ": found_inf set on finite gradients");
          const auto before = copy();
          fail(same(f, before, false), what + ": check_scaled_grads wrote");
          step(t, slots(f, false), {&inv, &found_f});
          fail(same(u, f, /*skip_grads=*/true), what + (table ? " reference" : " table") +
                                                     ": unscale-then-step and the scaled step differ");
          // A set flag: nothing moves.
          auto skipped = copy();
          const float set_flag = 1;
          step(t, slots(skipped, false), {&inv, &set_flag});
          fail(same(skipped, before, false), what + ": a step with found_inf set wrote");
          results[table][0] = std::move(u);
          results[table][1] = std::move(f);
        }
        fail(near(results[0][1], results[1][1], what), what + ": the table's scaled step against the reference's");
      }
      // The check alone finds an inf or NaN planted in the last gradient, as unscale_grads does.
      for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
        for (int table = 0; table < 2; ++table) {
          const Backend& t = table == 0 ? k : reference_backend();
          auto c = copy();
          set(c.back()[1].v, c.back()[1].v.numel() - 1, bad);
          float found = 0;
          const View fv{&found, DType::f32, {}, {}};
          std::vector<OptimizerSlot> g = slots(c, true);
          t.check_scaled_grads(dt, g, iv, fv);
          fail(found == 1, std::string(dtype_name(dt)) + ": check_scaled_grads missed " + std::to_string(bad));
        }
      }
    }
  }
  MESSAGE(cases << " scaled optimizer cases");
  return failed == 0;
}

}  // namespace ringflow::sweep
