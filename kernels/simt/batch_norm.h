// Batch normalization per channel (dim 1) of a 4-D x (N, C, H, W) or a 2-D x (N, C). Training
// and backward run three coalesced launches where every operand is dense with the channels
// innermost or contiguous NCHW (Note [Batch norm with channels innermost]), else one block per
// channel (two-pass statistics: mean, then the biased variance of the deviations); eval is
// elementwise. Statistics and sums in float (double for f64);
// gamma, beta, mean and var may be of any floating dtype (f32 with 16-bit activations).
// The same bodies run the fused forms, y = relu(bn(x) + residual) and its backward (the
// relu's mask read from y, dresidual written beside dx), and the running statistics'
// update is one small launch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/columns.h"
#include "ringflow/kernels/simt/fast_div.h"
#include "ringflow/kernels/simt/indexer.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

// A per-channel vector of any floating dtype (null: absent).
struct ChannelVector {
  void* p = nullptr;
  DType dtype = DType::f32;
  int64_t stride = 1;

  RF_HD double get(int64_t c, double if_null) const {
    if (!p) return if_null;
    const int64_t i = c * stride;
    switch (dtype) {
      case DType::f64: return static_cast<const double*>(p)[i];
      case DType::f16: return load(static_cast<const Half*>(p)[i]);
      case DType::bf16: return load(static_cast<const BFloat16*>(p)[i]);
      default: return static_cast<const float*>(p)[i];
    }
  }
  RF_HD void set(int64_t c, double v) const {
    const int64_t i = c * stride;
    switch (dtype) {
      case DType::f64: static_cast<double*>(p)[i] = v; return;
      case DType::f16: static_cast<Half*>(p)[i] = store<Half>(v); return;
      case DType::bf16: static_cast<BFloat16*>(p)[i] = store<BFloat16>(v); return;
      default: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    }
  }
};

// The elements of one channel: k in [0, N * H * W) -> offset, for an operand's strides.
struct ChannelWalk {
  int64_t H, W;            // 1, 1 for a 2-D x
  int64_t sn, sc, sh, sw;  // strides (sh, sw 0 for a 2-D x)
  RF_HD int64_t offset(int64_t c, int64_t k) const {
    const int64_t w = k % W, h = (k / W) % H, n = k / (W * H);
    return n * sn + c * sc + h * sh + w * sw;
  }
};

inline ChannelWalk channel_walk(const View& v) {
  if (v.dim() == 2) return {1, 1, v.strides[0], v.strides[1], 0, 0};
  return {v.shape[2], v.shape[3], v.strides[0], v.strides[1], v.strides[2], v.strides[3]};
}

template <class T>
struct BatchNormTrainBody {
  T* y;
  const T* x;
  ChannelWalk wy, wx;
  ChannelVector mean, var, gamma, beta;
  int64_t count;  // elements per channel
  double eps;
  bool relu = false;            // y = relu(bn(x) + residual)
  const T* residual = nullptr;  // may be null
  ChannelWalk wr{};

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t c) const {
    using A = acc_t<T>;
    const auto xa = [&](int64_t k) { return load(x[wx.offset(c, k)]); };
    const auto plus = [](A a, A b) { return a + b; };
    const A mu = block.reduce(count, A(0), xa, plus) / static_cast<A>(count);
    const A v = block.reduce(count, A(0), [&](int64_t k) {
      const A d = xa(k) - mu;
      return d * d;
    }, plus) / static_cast<A>(count);
    const A invstd = A(1) / simt::sqrt(v + static_cast<A>(eps));
    const A g = static_cast<A>(gamma.get(c, 1.0)), b = static_cast<A>(beta.get(c, 0.0));
    block.for_each(1, [&](int64_t) {
      mean.set(c, mu);
      var.set(c, v);
    });
    block.for_each(count, [&](int64_t k) {
      A out = (xa(k) - mu) * invstd * g + b;
      if (residual) out = out + load(residual[wr.offset(c, k)]);
      y[wy.offset(c, k)] = store<T>(relu && !(out > A(0)) ? A(0) : out);
    });
  }
};

template <class T>
struct BatchNormEvalBody {
  T* y;
  const T* x;
  ChannelWalk wy, wx;
  int64_t C, per_channel;  // elements per channel
  ChannelVector mean, var, gamma, beta;
  double eps;

  RF_HD void operator()(int64_t i) const {
    using A = acc_t<T>;
    const int64_t c = (i / per_channel) % C, k = (i / (per_channel * C)) * per_channel + i % per_channel;
    const A invstd = A(1) / simt::sqrt(static_cast<A>(var.get(c, 1.0)) + static_cast<A>(eps));
    const A xhat = (load(x[wx.offset(c, k)]) - static_cast<A>(mean.get(c, 0.0))) * invstd;
    y[wy.offset(c, k)] =
        store<T>(xhat * static_cast<A>(gamma.get(c, 1.0)) + static_cast<A>(beta.get(c, 0.0)));
  }
};

template <class T>
struct BatchNormBackwardBody {
  T* dx;
  const T* dy;
  const T* x;
  ChannelWalk wdx, wdy, wx;
  ChannelVector mean, var, gamma, dgamma, dbeta;
  int64_t count;
  double eps;
  const T* y = nullptr;    // the fused forward's output: dz = y > 0 ? dy : 0
  T* dresidual = nullptr;  // dz, where asked for
  ChannelWalk wyy{}, wdr{};

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t c) const {
    using A = acc_t<T>;
    const A mu = static_cast<A>(mean.get(c, 0.0));
    const A invstd = A(1) / simt::sqrt(static_cast<A>(var.get(c, 1.0)) + static_cast<A>(eps));
    const auto g = [&](int64_t k) {
      return y && !(load(y[wyy.offset(c, k)]) > A(0)) ? A(0) : load(dy[wdy.offset(c, k)]);
    };
    const auto xhat = [&](int64_t k) { return (load(x[wx.offset(c, k)]) - mu) * invstd; };
    const auto plus = [](A a, A b) { return a + b; };
    const A sum_dy = block.reduce(count, A(0), g, plus);
    const A sum_dy_xhat = block.reduce(count, A(0), [&](int64_t k) { return g(k) * xhat(k); }, plus);
    block.for_each(1, [&](int64_t) {
      if (dgamma.p) dgamma.set(c, sum_dy_xhat);
      if (dbeta.p) dbeta.set(c, sum_dy);
    });
    const A scale = static_cast<A>(gamma.get(c, 1.0)) * invstd, n = static_cast<A>(count);
    block.for_each(count, [&](int64_t k) {
      const A gk = g(k);
      dx[wdx.offset(c, k)] = store<T>(scale * (gk - sum_dy / n - xhat(k) * sum_dy_xhat / n));
      if (dresidual) dresidual[wdr.offset(c, k)] = store<T>(gk);
    });
  }
};

// The running statistics' update of backend.h's batch_norm_update_stats, one block: every
// thread reads num_batches_tracked before the first thread writes it back.
struct BatchNormStatsBody {
  ChannelVector running_mean, running_var, mean, var;
  int64_t* num_batches_tracked;  // may be null
  int64_t C, count;
  double momentum;

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t) const {
    const int64_t* n = num_batches_tracked;
    const int64_t batches = block.reduce(1, int64_t(0), [&](int64_t) { return n ? *n + 1 : int64_t(0); },
                                         [](int64_t a, int64_t b) { return a + b; });
    const double f = momentum >= 0 ? momentum : 1.0 / static_cast<double>(batches);
    const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    block.for_each(C, [&](int64_t c) {
      if (running_mean.p) running_mean.set(c, (1 - f) * running_mean.get(c, 0.0) + f * mean.get(c, 0.0));
      if (running_var.p) running_var.set(c, (1 - f) * running_var.get(c, 0.0) + f * var.get(c, 0.0) * unbias);
    });
    block.for_each(1, [&](int64_t) {
      if (num_batches_tracked) *num_batches_tracked = batches;
    });
  }
};

// The elementwise tail of a fused forward whose batch norm ran elsewhere (cuDNN):
// y = relu(y + residual), in place; residual may be null.
template <class T>
struct AddReluBody {
  T* y;
  const T* residual;  // may be null
  Indexer<2> ix;      // y, residual (y again without one)
  RF_HD void operator()(int64_t i) const {
    using A = acc_t<T>;
    int64_t off[2];
    ix.offsets(i, off);
    A v = load(y[off[0]]);
    if (residual) v = v + load(residual[off[1]]);
    y[off[0]] = store<T>(v > A(0) ? v : A(0));
  }
};

// Note [Batch norm with channels innermost]
// Channels-last 4-D operands (and contiguous 2-D ones) hold x as an (M, C) matrix, M = N*H*W,
// channel fastest; one block per channel would read it with a stride of C, a few useful bytes
// per memory transaction (on an H100 the 16-bit training steps spent most of their time there).
// So such operands take three launches that read along the rows: (1) per chunk of rows and
// channel (or pack of channels), one thread's partial statistics (adjacent threads on adjacent
// channels, several rows' loads in flight: kRowsInFlight); (2) one
// block per channel merging its chunks' partials (Chan's pairwise formula for means and squared
// deviations) into mean and var, and into per-channel coefficients in a workspace; (3) the
// elementwise pass with those coefficients, 16 bytes per access where C and the pointers
// allow. Backward the same with the sums of dz and dz * (x - mean), dz being dy under relu's
// mask. Contiguous NCHW operands take the same three launches with planes for chunks: phase 1
// one block per run of planes (n, c) .. (n + m - 1, c) of H * W contiguous elements each, read
// in packs where H * W allows (one block per channel left most of a large GPU idle where C is
// small; one block per plane left most of each block idle where H * W is small, as
// ResNet-50's 14x14 and 7x7 layers: m planes make kPlaneChunk elements or more), phase 3
// in packs of the whole tensor, the channel constant along a pack where H * W is a whole
// number of packs, else asked per element (7x7 moved one element per thread before).

inline bool channels_innermost(const View& v) { return v.dim() == 4 ? v.is_channels_last() : v.is_contiguous(); }

// The layout the three launches take for a set of operands (null ones aside).
enum class Dense { rows, planes, none };

inline Dense dense_layout(std::initializer_list<const View*> operands) {
  bool rows = true, planes = true;
  for (const View* v : operands) {
    if (!v) continue;
    rows = rows && channels_innermost(*v);
    planes = planes && v->dim() == 4 && v->is_contiguous() && v->numel() > 0;
  }
  return rows ? Dense::rows : planes ? Dense::planes : Dense::none;
}

// The channel of element i of a dense operand, and its step along the elements of a pack.
struct ChannelOf {
  FastDiv C, S;  // S = H * W for planes
  bool planes;
  RF_HD int64_t operator()(int64_t i) const { return planes ? C.mod(S.div(i)) : C.mod(i); }
  RF_HD int64_t step() const { return planes ? 0 : 1; }
  // The channel of element first + e of a pack of V from `first`, whose own channel is c0: a
  // pack inside one row or plane steps by step(); where planes are not a whole number of packs
  // (7x7) a pack may span two, and each element is asked.
  template <int V>
  RF_HD int64_t in_pack(int64_t first, int64_t c0, int e) const {
    return planes && S.divisor() % V != 0 ? (*this)(first + e) : c0 + e * step();
  }
};

// Elements a phase-1 block of planes reads at least (where the batch has the planes).
constexpr int64_t kPlaneChunk = 2048;

// Phase 1 over planes: chunk p of channel c is planes (p * per_chunk + j, c), j < planes_in(p),
// of S elements each, read in packs of V: S / V packs a plane.
struct PlaneChunks {
  int64_t N, C, per_chunk;
  FastDiv by_packs;  // by a plane's packs: a chunk's pack index -> its plane and the pack in it
  PlaneChunks(int64_t n, int64_t c, int64_t s, int64_t planes, int V)
      : N(n), C(c), per_chunk(planes), by_packs(s / V, planes * (s / V)) {}
  RF_HD int64_t packs() const { return by_packs.divisor(); }  // a plane's
  RF_HD int64_t planes_in(int64_t p) const { return N - p * per_chunk < per_chunk ? N - p * per_chunk : per_chunk; }
  // Where pack k of chunk p of channel c is, in packs from the start of x.
  RF_HD int64_t pack_at(int64_t p, int64_t c, int64_t k) const {
    int64_t j, e;
    by_packs.divmod(k, j, e);
    return ((p * per_chunk + j) * C + c) * packs() + e;
  }
};

// How the three launches walk a dense x: the chunks of phases 1 and 2 (for planes, runs of
// planes_per_chunk planes of one channel), the channel of an element in phase 3, and what a
// pack's length must divide (the channels of a row, the elements of a plane).
struct DenseWalk {
  ChannelChunks chunks;
  ChannelOf channel;
  int64_t pack_divisor;
  int64_t phase3_divisor;  // the same for phase 3: a row's channels, or all the elements of planes
  int64_t N = 0, planes_per_chunk = 0;  // planes only
  PlaneChunks planes(int V) const { return {N, chunks.C, pack_divisor, planes_per_chunk, V}; }
};

inline DenseWalk dense_walk(const View& x, Dense layout) {
  const int64_t C = x.shape[1], n = x.numel(), count = C == 0 ? 0 : n / C;
  if (layout == Dense::rows) return {channel_chunks(count, C), {FastDiv(C, n), FastDiv(), false}, C, C};
  const int64_t N = x.shape[0], S = x.shape[2] * x.shape[3];
  const int64_t m = std::min(N, std::max<int64_t>(1, (kPlaneChunk + S - 1) / S));
  return {{count, C, m * S, (N + m - 1) / m}, {FastDiv(C, n), FastDiv(S, n), true}, S, n, N, m};
}

// Count, mean and sum of squared deviations of a set of values; merged pairwise.
template <class A>
struct Moments {
  int64_t n = 0;
  A mean = 0, m2 = 0;
  RF_HD static Moments merge(const Moments& a, const Moments& b) {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean, fb = static_cast<A>(b.n) / static_cast<A>(n);
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * static_cast<A>(a.n) * fb};
  }
};

// Phase 1 forward: thread (p, g) -> the moments of chunk p of channels g * V .. g * V + V - 1,
// read as one pack per row (Welford's update: no sum of squares to cancel, whatever the
// values' offset).
template <class T, int V>
struct ChunkMomentsBody {
  const T* x;
  ChannelChunks cc;
  acc_t<T>* mean;  // (chunks, C): each chunk's mean of each channel
  acc_t<T>* m2;    // (chunks, C): its sum of squared deviations from that mean
  RF_HD void operator()(int64_t i) const {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int64_t groups = cc.C / V, g = i % groups, p = i / groups;
    A mu[V], sq[V];
    for (int e = 0; e < V; ++e) mu[e] = sq[e] = 0;
    const P* col = reinterpret_cast<const P*>(x + p * cc.chunk * cc.C) + g;
    for_rows(col, groups, cc.rows_in(p), [&](int64_t r, const P& v) {
      for (int e = 0; e < V; ++e) {
        const A u = load(v.e[e]), d = u - mu[e];
        mu[e] = mu[e] + d / static_cast<A>(r + 1);
        sq[e] = sq[e] + d * (u - mu[e]);
      }
    });
    for (int e = 0; e < V; ++e) {
      mean[p * cc.C + g * V + e] = mu[e];
      m2[p * cc.C + g * V + e] = sq[e];
    }
  }
};

// Phase 1 forward over planes: block per chunk of planes r = p * C + c -> its mean and sum of
// squared deviations (two passes over its packs, the second one mostly from cache).
template <class T, int V>
struct PlaneMomentsBody {
  const T* x;
  PlaneChunks pc;
  acc_t<T>* mean;  // (chunks, C)
  acc_t<T>* m2;
  template <class Block>
  RF_HD void operator()(const Block& block, int64_t r) const {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int64_t p = r / pc.C, c = r - p * pc.C, packs = pc.planes_in(p) * pc.packs();
    const P* xp = reinterpret_cast<const P*>(x);
    const auto plus = [](A a, A b) { return a + b; };
    const A mu = block.reduce(packs, A(0), [&](int64_t k) {
      const P v = xp[pc.pack_at(p, c, k)];
      A s = 0;
      for (int e = 0; e < V; ++e) s = s + load(v.e[e]);
      return s;
    }, plus) / static_cast<A>(packs * V);
    const A sq = block.reduce(packs, A(0), [&](int64_t k) {
      const P v = xp[pc.pack_at(p, c, k)];
      A s = 0;
      for (int e = 0; e < V; ++e) {
        const A d = load(v.e[e]) - mu;
        s = s + d * d;
      }
      return s;
    }, plus);
    block.for_each(1, [&](int64_t) {
      mean[r] = mu;
      m2[r] = sq;
    });
  }
};

// The per-channel coefficients of y = (x - center) * scale + shift (centred first: x * scale +
// (shift - center * scale) would cancel where the mean is large against the deviation).
template <class A>
struct NormCoefficients {
  A* center;  // (C)
  A* scale;
  A* shift;
};

// Phase 2 forward: block per channel -> mean, var and the coefficients of phase 3.
template <class T>
struct MergeMomentsBody {
  ChannelChunks cc;
  const acc_t<T>* chunk_mean;
  const acc_t<T>* chunk_m2;
  ChannelVector mean, var, gamma, beta;
  double eps;
  NormCoefficients<acc_t<T>> out;
  template <class Block>
  RF_HD void operator()(const Block& block, int64_t c) const {
    using A = acc_t<T>;
    const Moments<A> m = block.reduce(
        cc.chunks, Moments<A>{},
        [&](int64_t p) { return Moments<A>{cc.rows_in(p), chunk_mean[p * cc.C + c], chunk_m2[p * cc.C + c]}; },
        [](const Moments<A>& a, const Moments<A>& b) { return Moments<A>::merge(a, b); });
    block.for_each(1, [&](int64_t) {
      const A v = m.m2 > A(0) ? m.m2 / static_cast<A>(m.n) : A(0);
      const A k = static_cast<A>(gamma.get(c, 1.0)) / simt::sqrt(v + static_cast<A>(eps));
      mean.set(c, m.mean);
      var.set(c, v);
      out.center[c] = m.mean;
      out.scale[c] = k;
      out.shift[c] = static_cast<A>(beta.get(c, 0.0));
    });
  }
};

// Phase 3 forward: y = relu?((x - center) * scale + shift + residual), every operand dense
// alike; thread j takes the V elements from j * V on (V dividing C for rows: adjacent
// channels of one row; for planes one channel, or two where V does not divide S).
template <class T, int V>
struct NormalizeRowsBody {
  using P = Pack<T, V>;
  P* y;
  const P* x;
  const P* residual;  // may be null
  NormCoefficients<acc_t<T>> k;
  ChannelOf channel;
  bool relu;
  RF_HD void operator()(int64_t j) const {
    using A = acc_t<T>;
    const int64_t c0 = channel(j * V);
    const P xs = x[j], rs = residual ? residual[j] : P{};
    P out;
    for (int e = 0; e < V; ++e) {
      const int64_t c = channel.template in_pack<V>(j * V, c0, e);
      A v = (load(xs.e[e]) - k.center[c]) * k.scale[c] + k.shift[c];
      if (residual) v = v + load(rs.e[e]);
      out.e[e] = store<T>(relu && !(v > A(0)) ? A(0) : v);
    }
    y[j] = out;
  }
};

// dz of the backward: dy, or 0 where the fused forward's y (if has_y) was not positive.
template <class A>
RF_HD inline A masked(A dy, bool has_y, A y) {
  return has_y && !(y > A(0)) ? A(0) : dy;
}

// Phase 1 backward: thread (p, g) -> chunk p's sums of dz and dz * (x - mean) for channels
// g * V .. g * V + V - 1, read as packs.
template <class T, int V>
struct ChunkGradSumsBody {
  const T* dy;
  const T* x;
  const T* y;  // may be null
  ChannelChunks cc;
  ChannelVector mean;
  acc_t<T>* sum_dz;      // (chunks, C)
  acc_t<T>* sum_dz_xmu;  // (chunks, C)
  RF_HD void operator()(int64_t i) const {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    // One row's packs of dy, x and y (y: none where absent).
    struct Row {
      P dy, x, y;
    };
    struct Rows {
      const P *dy, *x, *y;
      RF_HD Row operator[](int64_t k) const { return {dy[k], x[k], y ? y[k] : P{}}; }
    };
    const int64_t groups = cc.C / V, g = i % groups, p = i / groups, first = p * cc.chunk * groups + g;
    A mu[V], s1[V], s2[V];
    for (int e = 0; e < V; ++e) {
      mu[e] = static_cast<A>(mean.get(g * V + e, 0.0));
      s1[e] = s2[e] = 0;
    }
    const Rows rows{reinterpret_cast<const P*>(dy) + first, reinterpret_cast<const P*>(x) + first,
                    y ? reinterpret_cast<const P*>(y) + first : nullptr};
    for_rows(rows, groups, cc.rows_in(p), [&](int64_t, const Row& v) {
      for (int e = 0; e < V; ++e) {
        const A dz = masked(load(v.dy.e[e]), y != nullptr, load(v.y.e[e]));
        s1[e] = s1[e] + dz;
        s2[e] = s2[e] + dz * (load(v.x.e[e]) - mu[e]);
      }
    });
    for (int e = 0; e < V; ++e) {
      sum_dz[p * cc.C + g * V + e] = s1[e];
      sum_dz_xmu[p * cc.C + g * V + e] = s2[e];
    }
  }
};

// The per-channel coefficients of dx = scale * (dz - mean_dz - (x - center) * xmu).
template <class A>
struct GradCoefficients {
  A* scale;  // (C)
  A* mean_dz;
  A* center;  // the batch's mean
  A* xmu;
};

template <class A>
struct SumPair {
  A a = 0, b = 0;
};

// Phase 1 backward over planes: block per chunk of planes r = p * C + c -> its sums of dz and
// dz * (x - mean), V elements at a time.
template <class T, int V>
struct PlaneGradSumsBody {
  const T* dy;
  const T* x;
  const T* y;  // may be null
  PlaneChunks pc;
  ChannelVector mean;
  acc_t<T>* sum_dz;  // (chunks, C)
  acc_t<T>* sum_dz_xmu;
  template <class Block>
  RF_HD void operator()(const Block& block, int64_t r) const {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int64_t p = r / pc.C, c = r - p * pc.C;
    const P* dyp = reinterpret_cast<const P*>(dy);
    const P* xp = reinterpret_cast<const P*>(x);
    const P* yp = reinterpret_cast<const P*>(y);
    const A mu = static_cast<A>(mean.get(c, 0.0));
    const SumPair<A> s = block.reduce(
        pc.planes_in(p) * pc.packs(), SumPair<A>{},
        [&](int64_t k) {
          const int64_t at = pc.pack_at(p, c, k);
          const P dys = dyp[at], xs = xp[at], ys = yp ? yp[at] : P{};
          SumPair<A> out;
          for (int e = 0; e < V; ++e) {
            const A g = masked(load(dys.e[e]), yp != nullptr, load(ys.e[e]));
            out.a = out.a + g;
            out.b = out.b + g * (load(xs.e[e]) - mu);
          }
          return out;
        },
        [](const SumPair<A>& u, const SumPair<A>& v) { return SumPair<A>{u.a + v.a, u.b + v.b}; });
    block.for_each(1, [&](int64_t) {
      sum_dz[r] = s.a;
      sum_dz_xmu[r] = s.b;
    });
  }
};

// Phase 2 backward: block per channel -> dgamma, dbeta and the coefficients of dx.
template <class T>
struct MergeGradSumsBody {
  ChannelChunks cc;
  const acc_t<T>* sum_dz;
  const acc_t<T>* sum_dz_xmu;
  ChannelVector mean, var, gamma, dgamma, dbeta;
  double eps;
  GradCoefficients<acc_t<T>> out;
  template <class Block>
  RF_HD void operator()(const Block& block, int64_t c) const {
    using A = acc_t<T>;
    const SumPair<A> s = block.reduce(
        cc.chunks, SumPair<A>{}, [&](int64_t p) { return SumPair<A>{sum_dz[p * cc.C + c], sum_dz_xmu[p * cc.C + c]}; },
        [](const SumPair<A>& u, const SumPair<A>& v) { return SumPair<A>{u.a + v.a, u.b + v.b}; });
    block.for_each(1, [&](int64_t) {
      const A invstd = A(1) / simt::sqrt(static_cast<A>(var.get(c, 1.0)) + static_cast<A>(eps));
      const A sum_dz_xhat = s.b * invstd, n = static_cast<A>(cc.M);
      if (dgamma.p) dgamma.set(c, sum_dz_xhat);
      if (dbeta.p) dbeta.set(c, s.a);
      out.scale[c] = static_cast<A>(gamma.get(c, 1.0)) * invstd;
      out.mean_dz[c] = s.a / n;
      out.center[c] = static_cast<A>(mean.get(c, 0.0));
      out.xmu[c] = sum_dz_xhat / n * invstd;
    });
  }
};

// Phase 3 backward: dx, and dresidual = dz where asked for; every operand dense alike, V
// elements per thread as in the forward.
template <class T, int V>
struct GradRowsBody {
  using P = Pack<T, V>;
  P* dx;
  P* dresidual;  // may be null
  const P* dy;
  const P* x;
  const P* y;  // may be null
  GradCoefficients<acc_t<T>> k;
  ChannelOf channel;
  RF_HD void operator()(int64_t j) const {
    using A = acc_t<T>;
    const int64_t c0 = channel(j * V);
    const P dys = dy[j], xs = x[j], ys = y ? y[j] : P{};
    P dxs, dzs;
    for (int e = 0; e < V; ++e) {
      const int64_t c = channel.template in_pack<V>(j * V, c0, e);
      const A g = masked(load(dys.e[e]), y != nullptr, load(ys.e[e]));
      dxs.e[e] = store<T>(k.scale[c] * (g - k.mean_dz[c] - (load(xs.e[e]) - k.center[c]) * k.xmu[c]));
      dzs.e[e] = store<T>(g);
    }
    dx[j] = dxs;
    if (dresidual) dresidual[j] = dzs;
  }
};

inline int64_t bn_channels(const View& x, const char* op) {
  check(x.dim() == 2 || x.dim() == 4, op, "x must be (N, C) or (N, C, H, W), got " +
                                              shape_str(x.shape));
  check_floating(x, op);
  return x.shape[1];
}

inline ChannelVector channel_vector(const View* v, int64_t C, const char* op, const char* what) {
  if (!v) return {};
  check(v->dim() == 1 && v->shape[0] == C, op,
        std::string(what) + " must be (" + std::to_string(C) + "), got " + shape_str(v->shape));
  check_floating(*v, op);
  return {v->data, v->dtype, v->strides[0]};
}

template <class Exec>
void batch_norm_forward_train(const Exec& exec, const View& y, const View& mean,
                              const View& var, const View& x, const View* gamma,
                              const View* beta, double eps, bool relu = false,
                              const View* residual = nullptr) {
  const char* op = relu ? "batch_norm_relu_forward_train" : "batch_norm_forward_train";
  const int64_t C = bn_channels(x, op);
  check_same_shape(y, x, op);
  check_same_dtype(y, x, op);
  if (residual) {
    check_same_shape(*residual, x, op);
    check_same_dtype(*residual, x, op);
  }
  const ChannelVector m = channel_vector(&mean, C, op, "mean"), v = channel_vector(&var, C, op, "var");
  const ChannelVector g = channel_vector(gamma, C, op, "gamma"), b = channel_vector(beta, C, op, "beta");
  const int64_t count = C == 0 ? 0 : x.numel() / C;
  if (const Dense layout = dense_layout({&y, &x, residual}); layout != Dense::none)
    return visit_floating(x.dtype, op, [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const DenseWalk walk = dense_walk(x, layout);
      const ChannelChunks& cc = walk.chunks;
      Scratch<Exec, A> scratch;
      A* chunk_mean = scratch.take(cc.chunks * C);
      A* chunk_m2 = scratch.take(cc.chunks * C);
      const NormCoefficients<A> k{scratch.take(C), scratch.take(C), scratch.take(C)};
      // Phase 1 reads a pack of channels (rows) or of a plane's elements per access where they
      // allow it.
      with_pack<T>(walk.pack_divisor, {x.data}, [&](auto pack) {
        constexpr int V = decltype(pack)::value;
        if (walk.channel.planes)
          exec.rows(cc.chunks * C, PlaneMomentsBody<T, V>{x.ptr<const T>(), walk.planes(V), chunk_mean, chunk_m2});
        else
          exec.elementwise(cc.chunks * C / V, ChunkMomentsBody<T, V>{x.ptr<const T>(), cc, chunk_mean, chunk_m2});
      });
      exec.rows(C, MergeMomentsBody<T>{cc, chunk_mean, chunk_m2, m, v, g, b, eps, k});
      const T* r = residual ? residual->ptr<const T>() : nullptr;
      with_pack<T>(walk.phase3_divisor, {y.data, x.data, r}, [&](auto pack) {
        constexpr int V = decltype(pack)::value;
        using P = Pack<T, V>;
        exec.elementwise(x.numel() / V, NormalizeRowsBody<T, V>{static_cast<P*>(y.data), static_cast<const P*>(x.data),
                                                                reinterpret_cast<const P*>(r), k,
                                                                walk.channel, relu});
      });
    });
  visit_floating(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    BatchNormTrainBody<T> body{y.ptr<T>(), x.ptr<const T>(), channel_walk(y), channel_walk(x), m, v, g, b,
                               count, eps};
    body.relu = relu;
    if (residual) {
      body.residual = residual->ptr<const T>();
      body.wr = channel_walk(*residual);
    }
    exec.rows(C, body);
  });
}

template <class Exec>
void batch_norm_forward_eval(const Exec& exec, const View& y, const View& x, const View& mean,
                             const View& var, const View* gamma, const View* beta, double eps) {
  const char* op = "batch_norm_forward_eval";
  const int64_t C = bn_channels(x, op);
  check_same_shape(y, x, op);
  check_same_dtype(y, x, op);
  const ChannelVector m = channel_vector(&mean, C, op, "mean"), v = channel_vector(&var, C, op, "var");
  const ChannelVector g = channel_vector(gamma, C, op, "gamma"), b = channel_vector(beta, C, op, "beta");
  const int64_t per_channel = x.dim() == 4 ? x.shape[2] * x.shape[3] : 1;
  visit_floating(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(x.numel(), BatchNormEvalBody<T>{y.ptr<T>(), x.ptr<const T>(), channel_walk(y),
                                                     channel_walk(x), C, per_channel, m, v, g, b,
                                                     eps});
  });
}

template <class Exec>
void batch_norm_backward(const Exec& exec, const View& dx, const View* dgamma, const View* dbeta,
                         const View& dy, const View& x, const View& mean, const View& var,
                         const View* gamma, double eps, const View* y = nullptr,
                         const View* dresidual = nullptr) {
  const char* op = y ? "batch_norm_relu_backward" : "batch_norm_backward";
  const int64_t C = bn_channels(x, op);
  for (const View* v : {&dx, &dy, y, dresidual}) {
    if (!v) continue;
    check_same_shape(*v, x, op);
    check_same_dtype(*v, x, op);
  }
  const ChannelVector m = channel_vector(&mean, C, op, "mean"), v = channel_vector(&var, C, op, "var");
  const ChannelVector g = channel_vector(gamma, C, op, "gamma");
  const ChannelVector dg = channel_vector(dgamma, C, op, "dgamma"), db = channel_vector(dbeta, C, op, "dbeta");
  const int64_t count = C == 0 ? 0 : x.numel() / C;
  if (const Dense layout = dense_layout({&dx, &dy, &x, y, dresidual}); layout != Dense::none)
    return visit_floating(x.dtype, op, [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const T* yp = y ? y->ptr<const T>() : nullptr;
      const DenseWalk walk = dense_walk(x, layout);
      const ChannelChunks& cc = walk.chunks;
      Scratch<Exec, A> scratch;
      A* sum_dz = scratch.take(cc.chunks * C);
      A* sum_dz_xmu = scratch.take(cc.chunks * C);
      const GradCoefficients<A> k{scratch.take(C), scratch.take(C), scratch.take(C), scratch.take(C)};
      with_pack<T>(walk.pack_divisor, {dy.data, x.data, yp}, [&](auto pack) {
        constexpr int V = decltype(pack)::value;
        if (walk.channel.planes)
          exec.rows(cc.chunks * C, PlaneGradSumsBody<T, V>{dy.ptr<const T>(), x.ptr<const T>(), yp, walk.planes(V), m,
                                                           sum_dz, sum_dz_xmu});
        else
          exec.elementwise(cc.chunks * C / V, ChunkGradSumsBody<T, V>{dy.ptr<const T>(), x.ptr<const T>(), yp, cc, m,
                                                                      sum_dz, sum_dz_xmu});
      });
      exec.rows(C, MergeGradSumsBody<T>{cc, sum_dz, sum_dz_xmu, m, v, g, dg, db, eps, k});
      T* dr = dresidual ? dresidual->ptr<T>() : nullptr;
      with_pack<T>(walk.phase3_divisor, {dx.data, dr, dy.data, x.data, yp}, [&](auto pack) {
        constexpr int V = decltype(pack)::value;
        using P = Pack<T, V>;
        exec.elementwise(x.numel() / V, GradRowsBody<T, V>{static_cast<P*>(dx.data), reinterpret_cast<P*>(dr),
                                                           static_cast<const P*>(dy.data),
                                                           static_cast<const P*>(x.data),
                                                           reinterpret_cast<const P*>(yp), k, walk.channel});
      });
    });
  visit_floating(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    BatchNormBackwardBody<T> body{dx.ptr<T>(), dy.ptr<const T>(), x.ptr<const T>(), channel_walk(dx),
                                  channel_walk(dy), channel_walk(x), m, v, g, dg, db, count, eps};
    if (y) {
      body.y = y->ptr<const T>();
      body.wyy = channel_walk(*y);
    }
    if (dresidual) {
      body.dresidual = dresidual->ptr<T>();
      body.wdr = channel_walk(*dresidual);
    }
    exec.rows(C, body);
  });
}

template <class Exec>
void batch_norm_update_stats(const Exec& exec, const View* running_mean, const View* running_var,
                             const View* num_batches_tracked, const View& mean, const View& var,
                             double momentum, int64_t count) {
  const char* op = "batch_norm_update_stats";
  check(mean.dim() == 1 && var.shape == mean.shape, op,
        "mean " + shape_str(mean.shape) + " and var " + shape_str(var.shape) + " must be one vector each");
  const int64_t C = mean.shape[0];
  check(!num_batches_tracked || (num_batches_tracked->numel() == 1 && num_batches_tracked->dtype == DType::i64),
        op, "num_batches_tracked must be one i64");
  check(count > 1, op, "needs more than one element per channel, got " + std::to_string(count));
  check(momentum >= 0 || num_batches_tracked, op, "a cumulative average (momentum < 0) needs num_batches_tracked");
  exec.rows(1, BatchNormStatsBody{channel_vector(running_mean, C, op, "running_mean"),
                                  channel_vector(running_var, C, op, "running_var"),
                                  channel_vector(&mean, C, op, "mean"), channel_vector(&var, C, op, "var"),
                                  num_batches_tracked ? num_batches_tracked->ptr<int64_t>() : nullptr, C, count,
                                  momentum});
}

// y = relu(y + residual) in place (residual may be null): the tail of a fused forward
// whose batch norm ran elsewhere.
template <class Exec>
void add_relu(const Exec& exec, const View& y, const View* residual) {
  const char* op = "batch_norm_relu_forward_train";
  if (residual) {
    check_same_shape(*residual, y, op);
    check_same_dtype(*residual, y, op);
  }
  visit_floating(y.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    exec.elementwise(y.numel(), AddReluBody<T>{y.ptr<T>(), residual ? residual->ptr<const T>() : nullptr,
                                               make_indexer<2>({&y, residual ? residual : &y}, op)});
  });
}

// cuDNN keeps 1 / sqrt(var + eps) of a batch where this table's interface keeps the biased
// variance: per channel, one from the other (to_var: var from invstd, else invstd from var).
struct InvstdVarBody {
  ChannelVector out, in;
  double eps;
  bool to_var;
  RF_HD void operator()(int64_t c) const {
    const double v = in.get(c, 1.0);
    // A constant channel's variance (0) may come back a rounding below 0: clamped.
    const double var = 1.0 / (v * v) - eps;
    out.set(c, to_var ? (var > 0 ? var : 0.0) : 1.0 / simt::sqrt(v + eps));
  }
};

template <class Exec>
void batch_norm_convert_stats(const Exec& exec, const View& out, const View& in, double eps, bool to_var) {
  const char* op = "batch_norm_convert_stats";
  check(in.dim() == 1 && out.shape == in.shape, op, "out " + shape_str(out.shape) + " and in " +
                                                        shape_str(in.shape) + " must be the same vector");
  const int64_t C = in.shape[0];
  exec.elementwise(C, InvstdVarBody{channel_vector(&out, C, op, "out"), channel_vector(&in, C, op, "in"),
                                    eps, to_var});
}

template <class Exec>
void set_batch_norm_kernels(Backend& b) {
  b.batch_norm_forward_train = [](const View& y, const View& mean, const View& var,
                                  const View& x, const View* gamma, const View* beta,
                                  double eps) {
    batch_norm_forward_train(Exec{}, y, mean, var, x, gamma, beta, eps);
  };
  b.batch_norm_forward_eval = [](const View& y, const View& x, const View& mean,
                                 const View& var, const View* gamma, const View* beta,
                                 double eps) {
    batch_norm_forward_eval(Exec{}, y, x, mean, var, gamma, beta, eps);
  };
  b.batch_norm_backward = [](const View& dx, const View* dgamma, const View* dbeta,
                             const View& dy, const View& x, const View& mean, const View& var,
                             const View* gamma, double eps) {
    batch_norm_backward(Exec{}, dx, dgamma, dbeta, dy, x, mean, var, gamma, eps);
  };
  b.batch_norm_relu_forward_train = [](const View& y, const View& mean, const View& var,
                                       const View& x, const View* gamma, const View* beta,
                                       const View* residual, double eps) {
    batch_norm_forward_train(Exec{}, y, mean, var, x, gamma, beta, eps, /*relu=*/true, residual);
  };
  b.batch_norm_relu_backward = [](const View& dx, const View* dresidual, const View* dgamma,
                                  const View* dbeta, const View& dy, const View& y, const View& x,
                                  const View& mean, const View& var, const View* gamma, double eps) {
    batch_norm_backward(Exec{}, dx, dgamma, dbeta, dy, x, mean, var, gamma, eps, &y, dresidual);
  };
  b.batch_norm_update_stats = [](const View* running_mean, const View* running_var,
                                 const View* num_batches_tracked, const View& mean, const View& var,
                                 double momentum, int64_t count) {
    batch_norm_update_stats(Exec{}, running_mean, running_var, num_batches_tracked, mean, var, momentum, count);
  };
}

}  // namespace ringflow::simt
