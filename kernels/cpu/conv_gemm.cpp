// Convolution backward-weights as im2col + one large sgemm per chunk of output pixels,
// for channels-last f32 operands with small outputs.
//
// Why: for layers whose output is a few pixels (VGG/ResNet at 4x4 or 2x2 on CIFAR),
// oneDNN 2.6 on AVX2 falls back to per-image GEMMs whose inner dimension is P*Q (4 at
// 2x2): 20-35 GFLOP/s on one core where sgemm over the whole batch (K = N*P*Q) runs at
// 60-75. im2col costs one pass over a patch matrix, which is small at these sizes.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ringflow/kernels/cpu/cpu_kernels.h"

namespace ringflow::cpu {
namespace {

// Output pixels at most this many per image: above it oneDNN's direct kernels win.
constexpr int64_t kMaxOutputPixels = 64;
// Rows of the patch matrix per sgemm: large enough for sgemm to run near its peak,
// small enough that the chunk stays in the last-level cache.
constexpr int64_t kChunkBytes = 8 << 20;
constexpr int64_t kMinChunkRows = 256;

struct Dims {
  int64_t N, C, H, W;  // input
  int64_t K, P, Q;     // output channels and size
  int64_t R, S;        // kernel
  int64_t rows() const { return N * P * Q; }
  int64_t patch() const { return R * S * C; }  // one row of the patch matrix: (r, s, c)
};

// Rows [row0, row0 + rows) of the patch matrix of channels-last x: row (n, p, q) holds
// x[n, p*sh - pt + r*dh, q*sw - pl + s*dw, :] for each (r, s), zeros outside the image.
void im2col(float* col, const float* x, const Dims& d, const Conv2dParams& p, int64_t row0,
            int64_t rows) {
  const int64_t L = d.patch();
#pragma omp parallel for schedule(static) if (rows * L > 65536)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = row0 + i;
    const int64_t n = row / (d.P * d.Q), pq = row % (d.P * d.Q);
    const int64_t oh = pq / d.Q, ow = pq % d.Q;
    float* out = col + i * L;
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t ih = oh * p.stride_h - p.pad_top + r * p.dilation_h;
      for (int64_t s = 0; s < d.S; ++s, out += d.C) {
        const int64_t iw = ow * p.stride_w - p.pad_left + s * p.dilation_w;
        if (ih < 0 || ih >= d.H || iw < 0 || iw >= d.W) {
          std::memset(out, 0, size_t(d.C) * sizeof(float));
        } else {
          std::memcpy(out, x + ((n * d.H + ih) * d.W + iw) * d.C, size_t(d.C) * sizeof(float));
        }
      }
    }
  }
}

// db[k] = sum over rows of dy[row, k] (dy row-major, K wide), in f64 per thread.
void bias_grad(const View& db, const float* dy, int64_t rows, int64_t K) {
  const int threads = rows * K > 65536 ? omp_get_max_threads() : 1;
  std::vector<double> partial(size_t(threads) * size_t(K), 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* acc = partial.data() + size_t(t) * size_t(K);
    for (int64_t row = rows * t / nt; row < rows * (t + 1) / nt; ++row) {
      const float* src = dy + row * K;
      for (int64_t k = 0; k < K; ++k) acc[k] += src[k];
    }
  }
  float* out = db.ptr<float>();
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0;
    for (int t = 0; t < threads; ++t) sum += partial[size_t(t) * size_t(K) + size_t(k)];
    out[k * db.strides[0]] = float(sum);
  }
}

}  // namespace

bool conv_gemm_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                                const Conv2dParams& p) {
  const bool f32 = dw.dtype == DType::f32 && dy.dtype == DType::f32 && x.dtype == DType::f32 &&
                   (!db || db->dtype == DType::f32);
  if (!f32 || dw.dim() != 4 || !x.is_channels_last() || !dy.is_channels_last()) return false;
  const Dims d{x.shape[0],  x.shape[1],  x.shape[2],  x.shape[3], dy.shape[1],
               dy.shape[2], dy.shape[3], dw.shape[2], dw.shape[3]};
  if (d.P * d.Q > kMaxOutputPixels || d.rows() == 0 || d.K == 0 || d.patch() == 0) return false;

  // dw_khwc[k, (r, s, c)] = sum over rows of dy[row, k] * col[row, (r, s, c)].
  const int64_t L = d.patch();
  const int64_t chunk = std::min(d.rows(), std::max(kMinChunkRows, kChunkBytes / (L * 4)));
  // Scratch from the caching allocator, so that steps do not fault fresh pages in.
  ScratchBuffer col_buf(size_t(chunk * L) * sizeof(float));
  ScratchBuffer dw_buf(size_t(d.K * L) * sizeof(float));
  float* col = static_cast<float*>(col_buf.data());
  float* dw_khwc = static_cast<float*>(dw_buf.data());
  const float* xp = x.ptr<const float>();
  const float* dyp = dy.ptr<const float>();
  for (int64_t row0 = 0; row0 < d.rows(); row0 += chunk) {
    const int64_t rows = std::min(chunk, d.rows() - row0);
    im2col(col, xp, d, p, row0, rows);
    const dnnl_status_t status =
        dnnl_sgemm('T', 'N', d.K, L, rows, 1.0f, dyp + row0 * d.K, d.K, col, L,
                   row0 == 0 ? 0.0f : 1.0f, dw_khwc, L);
    if (status != dnnl_success)
      throw std::runtime_error(describe("conv2d_backward_weights: dnnl_sgemm failed for dw dy x",
                                        {&dw, &dy, &x}));
  }
  // Into the caller's dw, whatever its strides (plain OIHW in practice).
  float* out = dw.ptr<float>();
  const float* src = dw_khwc;
#pragma omp parallel for schedule(static) if (d.K * L > 65536)
  for (int64_t k = 0; k < d.K; ++k) {
    for (int64_t r = 0; r < d.R; ++r)
      for (int64_t s = 0; s < d.S; ++s)
        for (int64_t c = 0; c < d.C; ++c)
          out[k * dw.strides[0] + c * dw.strides[1] + r * dw.strides[2] + s * dw.strides[3]] =
              src[k * L + (r * d.S + s) * d.C + c];
  }
  if (db) bias_grad(*db, dyp, d.rows(), d.K);
  return true;
}

}  // namespace ringflow::cpu
