// f32 convolutions by Winograd F(2x2, 3x3) where oneDNN has no Winograd of its own (CPUs
// with AVX2 and no AVX-512, or oneDNN held below AVX-512): forward, backward-data and
// backward-weights of 3x3, stride-1, pad-1 layers, on activations in oneDNN's nChw8c (where
// the framework keeps f32 between oneDNN primitives on such CPUs) or channels-last.
//
// Why: there oneDNN's direct kernels already run these layers at its sgemm rate
// (docs/kernels.md), so only fewer products make them faster: 16 per tile of 2x2 outputs
// instead of 36. The transforms' coefficients are 0, +-1 and 1/2, so the rounding stays
// close to a direct convolution's; --conv-algo direct keeps oneDNN's. Tiles go in chunks
// that stay in the cache from one transform to the next.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/derived_buffer.h"
#include "ringflow/kernels/cpu/staged_view.h"
#include "ringflow/kernels/cpu/winograd_tiles.h"

#define RF_AVX2 __attribute__((target("avx2,fma")))

namespace ringflow::cpu {
namespace {

using namespace winograd;

constexpr int kLanes = 8;   // f32 lanes of a ymm: the channels a transform handles at once
constexpr int kCols = 16;   // micro-kernel columns: two ymm (one in a last, narrower block)
constexpr int kRows = 6;    // forward chunks hold a multiple of this many tiles (rows_for)

// ---------------------------------------------------------------- GEMM
// c[R x 8Z] (+)= sum over k < depth of a(row, k) * b(k, col): a(row, k) at a + row * a_row +
// k * a_k, b(k, .) the 8Z columns at b + k * b_k.
struct GemmArgs {
  const float* a;
  int64_t a_row, a_k;
  const float* b;
  int64_t b_k, depth;
  float* c;
  int64_t ldc;
  bool accumulate;
};

// The loops over rows unrolled by pragma: left as loops, GCC kept the 12 accumulators on
// the stack (the kernels ran at ~37% of the sgemm ceiling).
template <int R, int Z>
RF_AVX2 void micro_kernel(const GemmArgs& g) {
  const float* a = g.a;
  const float* b = g.b;
  const int64_t a_row = g.a_row, a_k = g.a_k, b_k = g.b_k;
  __m256 acc[R * Z];
#pragma GCC unroll 12
  for (int i = 0; i < R * Z; ++i)
    acc[i] = g.accumulate ? _mm256_loadu_ps(g.c + i / Z * g.ldc + i % Z * kLanes) : _mm256_setzero_ps();
  for (int64_t k = g.depth; k > 0; --k, a += a_k, b += b_k) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = Z > 1 ? _mm256_loadu_ps(b + kLanes) : b0;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * a_row);
      acc[r * Z] = _mm256_fmadd_ps(av, b0, acc[r * Z]);
      if constexpr (Z > 1) acc[r * Z + 1] = _mm256_fmadd_ps(av, b1, acc[r * Z + 1]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < R * Z; ++i) _mm256_storeu_ps(g.c + i / Z * g.ldc + i % Z * kLanes, acc[i]);
}

// Rows of the micro-kernel with Z ymm of columns: 12 accumulators of the 16 registers.
template <int Z>
constexpr int rows_for() { return 12 / Z; }

template <int Z>
void gemm_rows(int64_t rows, GemmArgs g) {
  row_blocks<rows_for<Z>()>(
      rows, [&](auto r) { micro_kernel<decltype(r)::value, Z>(g); },
      [&](int r) {
        g.a += r * g.a_row;
        g.c += r * g.ldc;
      });
}

// The same for `rows` rows (a and c advance by a_row and ldc per row) and column block kb
// of `cols` columns, a multiple of 8: b and c start at its first column.
void gemm_block(int64_t rows, int64_t cols, int64_t kb, GemmArgs g) {
  g.b += kb * kCols;
  g.c += kb * kCols;
  if (cols - kb * kCols < kCols) return gemm_rows<1>(rows, g);
  gemm_rows<2>(rows, g);
}

// Column blocks of the micro-kernel in `cols` columns.
int64_t column_blocks(int64_t cols) { return (cols + kCols - 1) / kCols; }

// ---------------------------------------------------------------- activations
// An activation (N, C, H, W) as these kernels address it: channels c0 .. c0 + 8 of pixel px
// (counted within the image) of image n are the 8 floats at at(n, px, c0), in nChw8c and
// channels-last alike.
struct Act {
  float* p;
  int64_t image, pixel, block;
  float* at(int64_t n, int64_t px, int64_t c0) const {
    return p + n * image + px * pixel + c0 / kLanes * block;
  }
};

// v itself where it is nChw8c or channels-last, else a channels-last copy.
StagedView staged(const View& v, bool is_input) {
  return channels_last(v, is_input, DType::f32, MemoryLayout::nChw8c);
}

Act act_of(const View& v) {
  const int64_t C = v.shape[1], HW = v.shape[2] * v.shape[3];
  if (v.layout == MemoryLayout::nChw8c) return {v.ptr<float>(), C * HW, kLanes, HW * kLanes};
  return {v.ptr<float>(), HW * C, C, kLanes};
}

// ---------------------------------------------------------------- tile transforms
// The transformed input patch of tile t, all C channels: point e's at v + e * point_stride.
RF_AVX2 void input_tile(float* v, int64_t point_stride, const Act& x, int64_t C,
                        const Tiles& g, int64_t t) {
  const Tile tile(g, t);
  int64_t px[16];
  tile.patch(px);
  for (int64_t c0 = 0; c0 < C; c0 += kLanes) {
    __m256 d[16], u[16];
    for (int e = 0; e < kPoints; ++e)
      d[e] = px[e] < 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(x.at(tile.n, px[e], c0));
    input_transform(u, d);
    for (int e = 0; e < kPoints; ++e) _mm256_storeu_ps(v + e * point_stride + c0, u[e]);
  }
}

// The transformed output gradient of tile t, all K channels, as input_tile; adds each
// channel's sum of dy over the tile to db (K floats) where db is not null.
RF_AVX2 void grad_tile(float* z, int64_t point_stride, const Act& dy, int64_t K, const Tiles& g,
                       int64_t t, float* db) {
  const Tile tile(g, t);
  int64_t px[4];
  tile.outputs(px);
  for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
    __m256 y[4], u[16];
    for (int i = 0; i < 4; ++i)
      y[i] = px[i] < 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(dy.at(tile.n, px[i], k0));
    grad_transform(u, y);
    for (int e = 0; e < kPoints; ++e) _mm256_storeu_ps(z + e * point_stride + k0, u[e]);
    if (db) _mm256_storeu_ps(db + k0, _mm256_loadu_ps(db + k0) + ((y[0] + y[1]) + (y[2] + y[3])));
  }
}

// The outputs of tile t from its products (point e's at m + e * point_stride), plus bias.
RF_AVX2 void output_tile(const Act& y, int64_t K, const Tiles& g, int64_t t, const float* m,
                         int64_t point_stride, const float* bias) {
  const Tile tile(g, t);
  int64_t px[4];
  tile.outputs(px);
  for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
    __m256 points[16], out[4];
    for (int e = 0; e < kPoints; ++e) points[e] = _mm256_loadu_ps(m + e * point_stride + k0);
    output_transform(out, points, bias ? _mm256_loadu_ps(bias + k0) : _mm256_setzero_ps());
    for (int i = 0; i < 4; ++i)
      if (px[i] >= 0) _mm256_storeu_ps(y.at(tile.n, px[i], k0), out[i]);
  }
}

// ---------------------------------------------------------------- forward
// y (Cout channels) = conv3x3(x (Cin channels), weights) + bias, with the weights
// transformed: u[point][Cin][Cout].
struct Forward {
  Act y;
  int64_t Cout;
  Act x;
  int64_t Cin;
  Tiles g;
  const float* u;
  const float* bias;

  // Tiles [t0, t0 + n) through v and m, by `parts` threads of which the caller is `part`
  // (chunk_phases).
  void chunk(int64_t t0, int64_t n, Points<float> v, Points<float> m, int part, int parts) const {
    chunk_phases(
        n, column_blocks(Cout), part, parts,
        [&](int64_t i) { input_tile(v.data + i * Cin, v.stride, x, Cin, g, t0 + i); },
        [&](int64_t e, int64_t kb) {
          gemm_block(n, Cout, kb, {v.point(e), Cin, 1, u + e * Cin * Cout, Cout, Cin, m.point(e),
                                   Cout, false});
        },
        [&](int64_t i) { output_tile(y, Cout, g, t0 + i, m.data + i * Cout, m.stride, bias); });
  }

  void run() const {
    const bool own = kPoints * Cin * Cout * 4 <= kOwnWeightBytes;
    const ChunkPlan plan(g.count(), kPoints * 4 * (Cin + Cout),
                         own ? Sharing::own : Sharing::shared, kRows);
    const PointScratch<float> v(plan, Cin), m(plan, Cout);
    plan.run([&](int64_t t0, int64_t n, int slot, int part, int parts) {
      chunk(t0, n, v.slot(slot), m.slot(slot), part, parts);
    });
  }
};

// ---------------------------------------------------------------- backward-weights
// du[point][C][K] = sum over tiles of the transformed input times the transformed output
// gradient, and the bias gradient's partial sums; as Forward, by chunks, each thread's own
// or shared by all.
struct BackwardWeights {
  Act dy;
  int64_t K;
  Act x;
  int64_t C;
  Tiles g;
  bool with_bias;

  // Tiles [t0, t0 + n) through v and z, added onto du, and their dy onto db (K floats, the
  // calling thread's); by `parts` threads of which the caller is `part`.
  void chunk(int64_t t0, int64_t n, Points<float> v, Points<float> z, float* du, float* db,
             int part, int parts) const {
    chunk_phases(
        n, column_blocks(K), part, parts,
        [&](int64_t i) {
          input_tile(v.data + i * C, v.stride, x, C, g, t0 + i);
          grad_tile(z.data + i * K, z.stride, dy, K, g, t0 + i, with_bias ? db : nullptr);
        },
        [&](int64_t e, int64_t kb) {
          gemm_block(C, K, kb, {v.point(e), 1, C, z.point(e), K, n, du + e * C * K, K, true});
        },
        [](int64_t) {});
  }

  // Threads take whole chunks where a partial weight gradient of their own stays in a
  // core's cache; run() leaves plan.partials() partial sums in du, and one per thread in db (K
  // each), to be added.
  ChunkPlan plan() const {
    const bool own = kPoints * C * K * 4 <= kOwnPartialBytes;
    return ChunkPlan(g.count(), kPoints * 4 * (C + K), own ? Sharing::own : Sharing::shared, 1);
  }
  void run(const ChunkPlan& plan, float* du, float* db) const {
    const PointScratch<float> v(plan, C), z(plan, K);
    fill(View{du, DType::f32, {plan.partials() * kPoints * C * K}, {1}}, 0.0);
    fill(View{db, DType::f32, {omp_get_max_threads() * K}, {1}}, 0.0);
    plan.run([&](int64_t t0, int64_t n, int slot, int part, int parts) {
      chunk(t0, n, v.slot(slot), z.slot(slot), du + slot * kPoints * C * K,
            db + omp_get_thread_num() * K, part, parts);
    });
  }
};

// ---------------------------------------------------------------- weights
// u[point][in][out] from taps[in][3 * 3][out] for input channel i; `turn` reads each kernel
// turned 180 degrees.
RF_AVX2 void transform_row(float* u, const float* taps, int64_t in_channels, int64_t out_channels,
                           bool turn, int64_t i) {
  for (int64_t o = 0; o < out_channels; o += kLanes) {
    __m256 g[9], points[16];
    for (int j = 0; j < 9; ++j)
      g[j] = _mm256_loadu_ps(taps + (i * 9 + (turn ? 8 - j : j)) * out_channels + o);
    weight_transform(points, g);
    for (int e = 0; e < kPoints; ++e)
      _mm256_storeu_ps(u + (e * in_channels + i) * out_channels + o, points[e]);
  }
}

// The transformed weights of w, kept in its storage (cached_weights).
DerivedBuffer transformed_weights(const View& w, bool backward_data) {
  const int64_t K = w.shape[0], C = w.shape[1];
  const size_t bytes = size_t(kPoints * K * C) * sizeof(float);
  return cached_weights(w, "winograd_f32_weights", backward_data, bytes, [&](void* u) {
    const ScratchBuffer taps = weight_taps(w, backward_data);
    const int64_t in_channels = backward_data ? K : C, out_channels = backward_data ? C : K;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < in_channels; ++i)
      transform_row(static_cast<float*>(u), static_cast<const float*>(taps.data()), in_channels,
                    out_channels, backward_data, i);
  });
}

// taps[c][3 * 3][k] = the weight gradient from du (copies partial sums of [point][C][K]).
RF_AVX2 void weight_gradient_row(float* taps, const float* du, int copies, int64_t C, int64_t K,
                                 int64_t c) {
  for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
    __m256 points[16], dg[9];
    for (int e = 0; e < kPoints; ++e) {
      points[e] = _mm256_setzero_ps();
      for (int i = 0; i < copies; ++i)
        points[e] += _mm256_loadu_ps(du + ((i * kPoints + e) * C + c) * K + k0);
    }
    weight_gradient(dg, points);
    for (int j = 0; j < 9; ++j) _mm256_storeu_ps(taps + (c * 9 + j) * K + k0, dg[j]);
  }
}

bool applies(const View& in, const View& w, const View& out, const Conv2dParams& p) {
  return winograd_f32_runs_here() && convolution_fits(in, w, out, p, DType::f32, kLanes);
}

}  // namespace

// Where oneDNN runs AVX-512 its own f32 Winograd (F(4x4, 3x3)) takes these layers.
bool winograd_f32_runs_here() {
  static const bool runs = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                           !onednn_isa_has(dnnl::cpu_isa::avx512_core);
  return runs;
}

bool winograd_f32_forward(const View& y, const View& x, const View& w, const View* bias,
                          const Conv2dParams& p) {
  const int64_t K = y.dim() == 4 ? y.shape[1] : 0;
  if (!applies(x, w, y, p) || w.shape[0] != K || w.shape[1] != x.shape[1] || !bias_fits(bias, K))
    return false;
  ScratchBuffer bias_buf;
  const float* b = f32_bias(bias, K, bias_buf);
  const DerivedBuffer u = transformed_weights(w, /*backward_data=*/false);
  const StagedView in = staged(x, true), out = staged(y, false);
  Forward{act_of(out.view()), K, act_of(in.view()), x.shape[1],
          Tiles(x.shape[0], x.shape[2], x.shape[3]), static_cast<const float*>(u.data()), b}.run();
  out.finish();
  return true;
}

bool winograd_f32_backward_data(const View& dx, const View& dy, const View& w,
                                const Conv2dParams& p) {
  if (!applies(dy, w, dx, p) || w.shape[0] != dy.shape[1] || w.shape[1] != dx.shape[1])
    return false;
  const DerivedBuffer u = transformed_weights(w, /*backward_data=*/true);
  const StagedView in = staged(dy, true), out = staged(dx, false);
  Forward{act_of(out.view()), dx.shape[1], act_of(in.view()), dy.shape[1],
          Tiles(dy.shape[0], dy.shape[2], dy.shape[3]), static_cast<const float*>(u.data()),
          nullptr}.run();
  out.finish();
  return true;
}

bool winograd_f32_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                                   const Conv2dParams& p) {
  if (!applies(x, dw, dy, p) || dw.shape[0] != dy.shape[1] || dw.shape[1] != x.shape[1] ||
      !bias_fits(db, dy.shape[1]))
    return false;
  // At 2x2 and smaller, one tile per image: im2col + matmul (conv_gemm.cpp) is faster where
  // it takes the operands, channels-last (6.5 against 7.8 ms for 512 channels at batch 64).
  if (x.shape[2] * x.shape[3] <= 4 && x.is_channels_last() && dy.is_channels_last()) return false;
  const int64_t K = dy.shape[1], C = x.shape[1];
  const StagedView grad = staged(dy, true), in = staged(x, true);
  const BackwardWeights products{act_of(grad.view()), K, act_of(in.view()), C,
                                 Tiles(x.shape[0], x.shape[2], x.shape[3]), db != nullptr};
  const ChunkPlan plan = products.plan();
  const int threads = omp_get_max_threads();
  ScratchBuffer du_buf(size_t(plan.partials() * kPoints * C * K) * sizeof(float));
  ScratchBuffer db_buf(size_t(threads * K) * sizeof(float));
  float* du = static_cast<float*>(du_buf.data());
  float* bias_sums = static_cast<float*>(db_buf.data());
  products.run(plan, du, bias_sums);
  ScratchBuffer taps_buf(size_t(K * C * 9) * sizeof(float));
  float* taps = static_cast<float*>(taps_buf.data());
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) weight_gradient_row(taps, du, plan.partials(), C, K, c);
  store_weight_gradient(dw, taps);
  if (db) {
    for (int i = 1; i < threads; ++i)
      for (int64_t k = 0; k < K; ++k) bias_sums[k] += bias_sums[i * K + k];
    copy(*db, View{bias_sums, DType::f32, {K}, {1}});
  }
  return true;
}

}  // namespace ringflow::cpu
