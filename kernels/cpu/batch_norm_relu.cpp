// Training batch norm fused with relu(y + residual), forward and backward, for activations laid
// out as rows of C contiguous channels (channels-last NHWC, or (N, C)) in bf16 or f16:
// forward one pass for the statistics and one for the output, backward one for the sums and
// one for dx, where oneDNN's batch norm, the residual add and the relu each pass over memory
// on their own (docs/kernels.md). Other layouts (NCHW, mixed) and f32 compose the separate
// kernels.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/element.h"
#include "ringflow/kernels/cpu/loop_isa.h"

namespace ringflow::cpu {
namespace {

// Rows per partial sum: f32 accumulates at most this many terms before they go to f64.
constexpr int64_t kBlockRows = 256;

// Threads for `rows` rows of C channels: one below what pays for a team's start.
int team_size(int64_t rows, int64_t C) { return rows * C > 65536 ? omp_get_max_threads() : 1; }

// The number of rows when v is (N, C, H, W) channels-last and dense, or (N, C) dense: row r
// holds its C channels at v + r * C. 0 when v is laid out otherwise.
int64_t channel_rows(const View& v) {
  const bool rows = v.dim() == 4 ? v.is_channels_last() : v.dim() == 2 && v.is_contiguous();
  return rows ? v.numel() / std::max<int64_t>(v.shape[1], 1) : 0;
}

bool channel_vector(const View* v, int64_t C) {
  return !v || (v->dim() == 1 && v->shape[0] == C && v->dtype == DType::f32 && (C == 1 || v->strides[0] == 1));
}

// Whether every activation is x's dtype and shape in rows of channels, and every per-channel
// vector f32 and dense.
bool fits(const View& x, std::initializer_list<const View*> acts, std::initializer_list<const View*> vectors) {
  if (x.numel() == 0 || channel_rows(x) == 0) return false;
  // 16-bit only: f32 keeps oneDNN's batch norm, whose model-level deviation from PyTorch's f64
  // steps was the smaller (docs/kernels.md), and runs blocked under auto anyway.
  if (x.dtype != DType::bf16 && x.dtype != DType::f16) return false;
  for (const View* a : acts) {
    if (a && (a->dtype != x.dtype || a->shape != x.shape || channel_rows(*a) == 0)) return false;
  }
  for (const View* v : vectors) {
    if (!channel_vector(v, x.shape[1])) return false;
  }
  return true;
}

float at(const View* v, int64_t c, float otherwise) {
  return v ? v->ptr<const float>()[c] : otherwise;
}

// Per-channel mean and M2 (sum of squared deviations) of rows [begin, end), in f64: blocks of
// rows summed in f32 about a mean (the first block's own, found in a first look while it is in
// cache; then the mean so far), as a two-pass variance is, merged with Chan's formula.
struct Moments {
  double count = 0;
  std::vector<double> mean, m2;
  explicit Moments(int64_t C) : mean(size_t(C), 0.0), m2(size_t(C), 0.0) {}

  void merge(double n, const double* block_mean, const double* block_m2) {
    const double total = count + n;
    for (size_t c = 0; c < mean.size(); ++c) {
      const double delta = block_mean[c] - mean[c];
      mean[c] += delta * n / total;
      m2[c] += block_m2[c] + delta * delta * count * n / total;
    }
    count = total;
  }
};

template <class E>
void moments_of_rows(Moments& out, const typename E::T* x, int64_t C, int64_t begin, int64_t end) {
  std::vector<float> shift(static_cast<size_t>(C)), s1(static_cast<size_t>(C)), s2(static_cast<size_t>(C));
  std::vector<double> bm(static_cast<size_t>(C)), bm2(static_cast<size_t>(C));
  for (int64_t r0 = begin; r0 < end; r0 += kBlockRows) {
    const int64_t r1 = std::min(end, r0 + kBlockRows);
    const double n = double(r1 - r0);
    sized_loop<typename E::T>([&] {
      float* __restrict k = shift.data();
      float* __restrict a = s1.data();
      float* __restrict b = s2.data();
      if (r0 == begin) {  // the first block's own mean; later blocks go about the mean so far
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) k[c] = 0.f;
        for (int64_t r = r0; r < r1; ++r) {
          const typename E::T* __restrict row = x + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) k[c] += E::load(row[c]);
        }
        const float inv_n = float(1.0 / n);
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) k[c] *= inv_n;
      } else {
        const double* __restrict so_far = out.mean.data();
        for (int64_t c = 0; c < C; ++c) k[c] = float(so_far[c]);
      }
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) a[c] = b[c] = 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        const typename E::T* __restrict row = x + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float d = E::load(row[c]) - k[c];
          a[c] += d;
          b[c] += d * d;
        }
      }
    });
    for (int64_t c = 0; c < C; ++c) {
      bm[c] = double(shift[c]) + double(s1[c]) / n;
      const double m2 = double(s2[c]) - double(s1[c]) * double(s1[c]) / n;
      bm2[c] = m2 < 0 ? 0.0 : m2;  // rounding below zero; a NaN (from an inf) stays
    }
    out.merge(n, bm.data(), bm2.data());
  }
}

// mean and biased var of x's channels over its `rows` rows, each thread taking a range of rows.
template <class E>
Moments batch_moments(const typename E::T* x, int64_t C, int64_t rows) {
  const int threads = team_size(rows, C);
  std::vector<Moments> part(static_cast<size_t>(threads), Moments(C));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    moments_of_rows<E>(part[size_t(t)], x, C, rows * t / nt, rows * (t + 1) / nt);
  }
  Moments all(C);
  for (const Moments& p : part) {
    if (p.count > 0) all.merge(p.count, p.mean.data(), p.m2.data());
  }
  return all;
}

// body(begin, end) over ranges of rows, in parallel where there is enough to share.
template <class Body>
void for_rows(int64_t rows, int64_t C, const Body& body) {
  const int threads = team_size(rows, C);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    body(rows * t / nt, rows * (t + 1) / nt);
  }
}

template <class E>
void forward(const View& y, const View& mean, const View& var, const View& x, const View* gamma,
             const View* beta, const View* residual, double eps) {
  using T = typename E::T;
  const int64_t C = x.shape[1], rows = channel_rows(x);
  const Moments m = batch_moments<E>(x.ptr<const T>(), C, rows);
  // y = (x - mean) scale + beta, as PyTorch computes it: x scale + (beta - mean scale) would
  // lose x's digits to the cancellation where the mean is large against the spread.
  std::vector<float> mu(static_cast<size_t>(C)), scale(static_cast<size_t>(C)), offset(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double v = m.m2[size_t(c)] / m.count;  // biased, as the contract's
    const double invstd = 1.0 / std::sqrt(v + eps);
    mean.ptr<float>()[c] = mu[size_t(c)] = float(m.mean[size_t(c)]);
    var.ptr<float>()[c] = float(v);
    scale[size_t(c)] = float(at(gamma, c, 1.f) * invstd);
    offset[size_t(c)] = at(beta, c, 0.f);
  }
  const T* px = x.ptr<const T>();
  const T* pr = residual ? residual->ptr<const T>() : nullptr;
  T* py = y.ptr<T>();
  for_rows(rows, C, [&](int64_t begin, int64_t end) {
    sized_loop<T>([&] {
      const float* __restrict m0 = mu.data();
      const float* __restrict s = scale.data();
      const float* __restrict h = offset.data();
      for (int64_t r = begin; r < end; ++r) {
        const T* __restrict xr = px + r * C;
        T* __restrict yr = py + r * C;
        if (pr) {
          const T* __restrict rr = pr + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const float v = (E::load(xr[c]) - m0[c]) * s[c] + h[c] + E::load(rr[c]);
            yr[c] = E::store(v < 0.f ? 0.f : v);
          }
        } else {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const float v = (E::load(xr[c]) - m0[c]) * s[c] + h[c];
            yr[c] = E::store(v < 0.f ? 0.f : v);
          }
        }
      }
    });
  });
}

// Per thread: sum of dz and of dz * (x - mean) per channel over its rows, dz = y > 0 ? dy : 0
// (also written to dresidual where given).
template <class E>
void backward_sums(const typename E::T* dy, const typename E::T* y, const typename E::T* x,
                   typename E::T* dres, const float* mean, int64_t C, int64_t begin, int64_t end,
                   double* sum_dz, double* sum_dzx) {
  std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  for (int64_t r0 = begin; r0 < end; r0 += kBlockRows) {
    const int64_t r1 = std::min(end, r0 + kBlockRows);
    sized_loop<typename E::T>([&] {
      float* __restrict pa = a.data();
      float* __restrict pb = b.data();
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) pa[c] = pb[c] = 0.f;
      for (int64_t r = r0; r < r1; ++r) {
        const typename E::T* __restrict dyr = dy + r * C;
        const typename E::T* __restrict yr = y + r * C;
        const typename E::T* __restrict xr = x + r * C;
        if (dres) {
          typename E::T* __restrict dr = dres + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const float dz = E::load(yr[c]) > 0.f ? E::load(dyr[c]) : 0.f;
            dr[c] = E::store(dz);
            pa[c] += dz;
            pb[c] += dz * (E::load(xr[c]) - mean[c]);
          }
        } else {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            const float dz = E::load(yr[c]) > 0.f ? E::load(dyr[c]) : 0.f;
            pa[c] += dz;
            pb[c] += dz * (E::load(xr[c]) - mean[c]);
          }
        }
      }
    });
    for (int64_t c = 0; c < C; ++c) {
      sum_dz[c] += a[size_t(c)];
      sum_dzx[c] += b[size_t(c)];
    }
  }
}

template <class E>
void backward(const View& dx, const View* dresidual, const View* dgamma, const View* dbeta,
              const View& dy, const View& y, const View& x, const View& mean, const View& var,
              const View* gamma, double eps) {
  using T = typename E::T;
  const int64_t C = x.shape[1], rows = channel_rows(x);
  const T *pdy = dy.ptr<const T>(), *py = y.ptr<const T>(), *px = x.ptr<const T>();
  T* pdr = dresidual ? dresidual->ptr<T>() : nullptr;
  const float* mu = mean.ptr<const float>();
  const int threads = team_size(rows, C);
  std::vector<double> sums(size_t(threads) * 2 * size_t(C), 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* own = sums.data() + size_t(t) * 2 * size_t(C);
    backward_sums<E>(pdy, py, px, pdr, mu, C, rows * t / nt, rows * (t + 1) / nt, own, own + C);
  }
  // dx = gamma invstd (dz - sum_dz / M - (x - mean) invstd^2 sum_dzx / M), M the rows.
  std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C)), k(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double sum_dz = 0, sum_dzx = 0;
    for (int t = 0; t < threads; ++t) {
      sum_dz += sums[size_t(t) * 2 * size_t(C) + size_t(c)];
      sum_dzx += sums[size_t(t) * 2 * size_t(C) + size_t(C + c)];
    }
    const double invstd = 1.0 / std::sqrt(double(var.ptr<const float>()[c]) + eps);
    if (dgamma) dgamma->ptr<float>()[c] = float(sum_dzx * invstd);
    if (dbeta) dbeta->ptr<float>()[c] = float(sum_dz);
    a[size_t(c)] = float(at(gamma, c, 1.f) * invstd);
    b[size_t(c)] = float(sum_dz / double(rows));
    k[size_t(c)] = float(invstd * invstd * sum_dzx / double(rows));
  }
  T* pdx = dx.ptr<T>();
  for_rows(rows, C, [&](int64_t begin, int64_t end) {
    sized_loop<T>([&] {
      const float *__restrict pa = a.data(), *__restrict pb = b.data(), *__restrict pk = k.data();
      for (int64_t r = begin; r < end; ++r) {
        const T* __restrict dyr = pdy + r * C;
        const T* __restrict yr = py + r * C;
        const T* __restrict xr = px + r * C;
        T* __restrict dxr = pdx + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const float dz = E::load(yr[c]) > 0.f ? E::load(dyr[c]) : 0.f;
          dxr[c] = E::store(pa[c] * (dz - pb[c] - (E::load(xr[c]) - mu[c]) * pk[c]));
        }
      }
    });
  });
}

}  // namespace

void batch_norm_relu_forward_train(const View& y, const View& mean, const View& var, const View& x,
                                   const View* gamma, const View* beta, const View* residual, double eps) {
  const bool done = fits(x, {&y, residual}, {&mean, &var, gamma, beta}) && with_elem(x.dtype, [&](auto e) {
    if constexpr (std::is_same_v<decltype(e), F32>) return false;
    else forward<decltype(e)>(y, mean, var, x, gamma, beta, residual, eps);
    return true;
  });
  if (done) return;
  batch_norm_forward_train(y, mean, var, x, gamma, beta, eps);
  if (residual) binary(BinaryOp::add, y, y, *residual);
  unary(UnaryOp::relu, y, y);
}

void batch_norm_relu_backward(const View& dx, const View* dresidual, const View* dgamma, const View* dbeta,
                              const View& dy, const View& y, const View& x, const View& mean, const View& var,
                              const View* gamma, double eps) {
  const bool done = fits(x, {&dx, dresidual, &dy, &y}, {&mean, &var, gamma, dgamma, dbeta}) &&
                    with_elem(x.dtype, [&](auto e) {
                      if constexpr (std::is_same_v<decltype(e), F32>) return false;
                      else backward<decltype(e)>(dx, dresidual, dgamma, dbeta, dy, y, x, mean, var, gamma, eps);
                      return true;
                    });
  if (done) return;
  // dz into dresidual, which equals it, or into a buffer laid out as dy (so that oneDNN reads
  // it as it reads x, without a reorder, where dy is dense). relu_backward passes dy where y is
  // NaN, where the fused loops (and the reference) give 0.
  ScratchBuffer buffer;
  View dz;
  if (dresidual) {
    dz = *dresidual;
  } else {
    buffer = ScratchBuffer(size_t(dy.numel()) * dtype_size(dy.dtype));
    dz = View{buffer.data(), dy.dtype, dy.shape, is_dense(dy) ? dy.strides : contiguous_strides(dy.shape)};
  }
  binary(BinaryOp::relu_backward, dz, dy, y);
  batch_norm_backward(dx, dgamma, dbeta, dz, x, mean, var, gamma, eps);
}

}  // namespace ringflow::cpu
