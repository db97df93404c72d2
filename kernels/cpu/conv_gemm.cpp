// Convolution backward-weights as im2col + one large GEMM per chunk of output pixels, for
// channels-last f32 or bf16 operands with small outputs.
//
// Why: for layers whose output is a few pixels (VGG/ResNet at 4x4 or 2x2 on CIFAR),
// oneDNN 2.6's backward-weights kernels parallelise badly: on AVX2 per-image GEMMs whose
// inner dimension is P*Q (4 at 2x2), far below sgemm over the whole batch (K = N*P*Q);
// on AMX well below its bf16 matmul on the same product (docs/kernels.md). im2col costs
// one pass over a patch matrix, small at these sizes.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ringflow/kernels/cpu/bf16.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"

namespace ringflow::cpu {
namespace {

// Output pixels at most this many per image: above it oneDNN's direct kernels win. bf16 on
// AMX: its kernel is as fast as the matmul from 8x8 up; on AVX512-BF16 without AMX (where
// the Winograd kernels run) the matmul stays ahead of its strided kernels up to 16x16 (the
// strided layers of ResNet, docs/kernels.md; stride 1 was not measured).
int64_t max_output_pixels(DType dtype, const Conv2dParams& p) {
  if (dtype != DType::bf16) return 64;
  const bool strided = p.stride_h > 1 || p.stride_w > 1;
  return strided && winograd_runs_here() ? 256 : 16;
}
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
template <class T>
void im2col(T* col, const T* x, const Dims& d, const Conv2dParams& p, int64_t row0,
            int64_t rows) {
  const int64_t L = d.patch();
#pragma omp parallel for schedule(static) if (rows * L > 65536)
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = row0 + i;
    const int64_t n = row / (d.P * d.Q), pq = row % (d.P * d.Q);
    const int64_t oh = pq / d.Q, ow = pq % d.Q;
    T* out = col + i * L;
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t ih = oh * p.stride_h - p.pad_top + r * p.dilation_h;
      for (int64_t s = 0; s < d.S; ++s, out += d.C) {
        const int64_t iw = ow * p.stride_w - p.pad_left + s * p.dilation_w;
        if (ih < 0 || ih >= d.H || iw < 0 || iw >= d.W) {
          std::memset(out, 0, size_t(d.C) * sizeof(T));
        } else {
          std::memcpy(out, x + ((n * d.H + ih) * d.W + iw) * d.C, size_t(d.C) * sizeof(T));
        }
      }
    }
  }
}

inline float load(float v) { return v; }
inline float load(uint16_t v) { return from_bf16(v); }

// db[k] = sum over rows of dy[row, k] (dy row-major, K wide), in f64 per thread.
template <class T>
void bias_grad(const View& db, const T* dy, int64_t rows, int64_t K) {
  const int threads = rows * K > 65536 ? omp_get_max_threads() : 1;
  std::vector<double> partial(size_t(threads) * size_t(K), 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* acc = partial.data() + size_t(t) * size_t(K);
    for (int64_t row = rows * t / nt; row < rows * (t + 1) / nt; ++row) {
      const T* src = dy + row * K;
      for (int64_t k = 0; k < K; ++k) acc[k] += load(src[k]);
    }
  }
  std::vector<float> sums(size_t(K), 0.f);
  for (int64_t k = 0; k < K; ++k) {
    double sum = 0;
    for (int t = 0; t < threads; ++t) sum += partial[size_t(t) * size_t(K) + size_t(k)];
    sums[size_t(k)] = float(sum);
  }
  copy(db, View{sums.data(), DType::f32, {K}, {1}});
}

// dw_khwc (f32, K x L) = (row0 == 0 ? 0 : dw_khwc) + dy^T col, dy rows x K and col rows x L.
void accumulate_f32(float* dw_khwc, const float* dy, const float* col, const Dims& d,
                    int64_t rows, bool first, const View& dw) {
  const int64_t L = d.patch();
  const dnnl_status_t status = dnnl_sgemm('T', 'N', d.K, L, rows, 1.0f, dy, d.K, col, L,
                                          first ? 0.0f : 1.0f, dw_khwc, L);
  if (status != dnnl_success)
    throw std::runtime_error(describe("conv2d_backward_weights: dnnl_sgemm failed for dw", {&dw}));
}

// The same with bf16 dy and col through oneDNN's matmul (f32 accumulation; the sum post-op
// adds onto the previous chunks).
void accumulate_bf16(float* dw_khwc, const uint16_t* dy, const uint16_t* col, const Dims& d,
                     int64_t rows, bool first, const View& dw) {
  using md = dnnl::memory::desc;
  using dt = dnnl::memory::data_type;
  const int64_t L = d.patch();
  KeyBuilder k("conv2d_backward_weights_gemm");
  k.add(d.K).add(L).add(rows).add(int64_t(first));
  auto ctx = [&] { return describe("conv2d_backward_weights (im2col matmul) dw", {&dw}); };
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    dnnl::matmul::desc desc(md({d.K, rows}, dt::bf16, {1, d.K}), md({rows, L}, dt::bf16, {L, 1}),
                            md({d.K, L}, dt::f32, {L, 1}));
    dnnl::post_ops ops;
    if (!first) ops.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    auto pd = std::make_shared<dnnl::matmul::primitive_desc>(desc, attr, dnnl_engine());
    return CachedPrimitive{dnnl::matmul(*pd), pd};
  });
  if (!prim) throw std::runtime_error(ctx() + ": oneDNN has no bf16 matmul here");
  const auto& pd = prim->get<dnnl::matmul::primitive_desc>();
  auto& e = dnnl_engine();
  execute(*prim,
          {{DNNL_ARG_SRC, dnnl::memory(pd.src_desc(), e, const_cast<uint16_t*>(dy))},
           {DNNL_ARG_WEIGHTS, dnnl::memory(pd.weights_desc(), e, const_cast<uint16_t*>(col))},
           {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), e, dw_khwc)}},
          ctx);
}

inline void accumulate(float* dw_khwc, const float* dy, const float* col, const Dims& d,
                       int64_t rows, bool first, const View& dw) {
  accumulate_f32(dw_khwc, dy, col, d, rows, first, dw);
}
inline void accumulate(float* dw_khwc, const uint16_t* dy, const uint16_t* col, const Dims& d,
                       int64_t rows, bool first, const View& dw) {
  accumulate_bf16(dw_khwc, dy, col, d, rows, first, dw);
}

template <class T>
void backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                      const Dims& d, const Conv2dParams& p) {
  // dw_khwc[k, (r, s, c)] = sum over rows of dy[row, k] * col[row, (r, s, c)].
  const int64_t L = d.patch();
  const int64_t chunk =
      std::min(d.rows(), std::max(kMinChunkRows, kChunkBytes / (L * int64_t(sizeof(T)))));
  // Scratch from the caching allocator, so that steps do not fault fresh pages in.
  ScratchBuffer col_buf(size_t(chunk * L) * sizeof(T));
  ScratchBuffer dw_buf(size_t(d.K * L) * sizeof(float));
  T* col = static_cast<T*>(col_buf.data());
  float* dw_khwc = static_cast<float*>(dw_buf.data());
  const T* xp = x.ptr<const T>();
  const T* dyp = dy.ptr<const T>();
  for (int64_t row0 = 0; row0 < d.rows(); row0 += chunk) {
    const int64_t rows = std::min(chunk, d.rows() - row0);
    im2col(col, xp, d, p, row0, rows);
    accumulate(dw_khwc, dyp + row0 * d.K, col, d, rows, row0 == 0, dw);
  }
  // Into the caller's dw, in its strides and dtype: dw_khwc seen as (K, C, R, S).
  move_weights(dw, View{dw_khwc, DType::f32, {d.K, d.C, d.R, d.S}, {L, 1, d.S * d.C, d.C}},
               "conv_gemm weights");
  if (db) bias_grad(*db, dyp, d.rows(), d.K);
}

}  // namespace

void conv_bias_grad(const View& db, const uint16_t* dy, int64_t rows, int64_t K) {
  bias_grad(db, dy, rows, K);
}

bool conv_gemm_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                                const Conv2dParams& p) {
  const DType t = x.dtype;
  const bool alike = (t == DType::f32 || t == DType::bf16) && dw.dtype == t && dy.dtype == t &&
                     (!db || db->dtype == t);
  if (!alike || dw.dim() != 4 || !dnnl_friendly({&dw}) || !x.is_channels_last() ||
      !dy.is_channels_last())
    return false;
  const Dims d{x.shape[0],  x.shape[1],  x.shape[2],  x.shape[3], dy.shape[1],
               dy.shape[2], dy.shape[3], dw.shape[2], dw.shape[3]};
  if (d.P * d.Q > max_output_pixels(t, p) || d.rows() == 0 || d.K == 0 || d.patch() == 0)
    return false;
  if (t == DType::f32) backward_weights<float>(dw, db, dy, x, d, p);
  else backward_weights<uint16_t>(dw, db, dy, x, d, p);
  return true;
}

}  // namespace ringflow::cpu
