// bf16 convolutions by Winograd F(2x2, 3x3) on CPUs with AVX512-BF16 and no AMX: forward,
// backward-data and backward-weights of 3x3, stride-1, pad-1 layers with channels-last
// activations.
//
// Why: oneDNN 2.6 has Winograd only in f32, so there its bf16 direct convolutions lose
// much of their speed-up to f32 Winograd's 2.25x fewer products. The tile transforms run in
// f32 and round once to bf16 (their coefficients are 0, +-1 and 1/2); the 16 products per
// tile are GEMMs that accumulate in f32 (vdpbf16ps). Rounding the transformed operands adds
// to the output's own rounding, so the error is a few times a direct bf16 convolution's
// (docs/kernels.md); --conv-algo direct keeps oneDNN's. Tiles go in chunks sized for the
// cache (but for backward-weights' shared chunks: BackwardWeights).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/derived_buffer.h"
#include "ringflow/kernels/cpu/staged_view.h"
#include "ringflow/kernels/cpu/winograd_tiles.h"

#define RF_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

namespace ringflow::cpu {
namespace {

using namespace winograd;

constexpr int kRows = 12;    // forward chunks hold a multiple of this many tiles (rows_for)
constexpr int kCols = 64;    // micro-kernel columns: four zmm of f32 (fewer in a last block)
constexpr int kLanes = 16;   // f32 lanes of a zmm: the channels a transform handles at once

// ---------------------------------------------------------------- GEMM
// c[R x 16Z] (+)= sum over pairs p of a(row, p) . b(p, col): a(row, p) is the bf16 pair at
// a + row * a_row + p * a_pair, b(p, .) the 16Z columns of pairs at b + p * b_pair (the two
// values of a pair adjacent, as vdpbf16ps takes them). Z = 4 (64 columns: each row of a
// read once for 64 channels) but in a last, narrower block.
struct GemmArgs {
  const uint16_t* a;
  int64_t a_row, a_pair;
  const uint16_t* b;
  int64_t b_pair, pairs;
  float* c;
  int64_t ldc;
  bool accumulate;
};

// The loops over the accumulators unrolled by pragma: left as loops, GCC kept acc on the
// stack outside the pairs loop and copied all 24 there and back on every call (~10% of a
// 64-channel layer; docs/kernels.md), as it did in winograd_f32.cpp.
template <int R, int Z>
RF_AVX512BF16 void micro_kernel(const GemmArgs& g) {
  __m512 acc[R][Z];
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < Z; ++z)
      acc[r][z] = g.accumulate ? _mm512_loadu_ps(g.c + r * g.ldc + z * kLanes) : _mm512_setzero_ps();
  for (int64_t p = 0; p < g.pairs; ++p) {
    const uint16_t* bp = g.b + p * g.b_pair;
    __m512bh b[Z];
    for (int z = 0; z < Z; ++z) b[z] = (__m512bh)_mm512_loadu_si512(bp + z * 2 * kLanes);
    const uint16_t* ap = g.a + p * g.a_pair;
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, ap + r * g.a_row, sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      for (int z = 0; z < Z; ++z) acc[r][z] = _mm512_dpbf16_ps(acc[r][z], av, b[z]);
    }
  }
#pragma GCC unroll 24
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int z = 0; z < Z; ++z) _mm512_storeu_ps(g.c + r * g.ldc + z * kLanes, acc[r][z]);
}

// Rows of the micro-kernel with Z zmm of columns: 24 accumulators.
template <int Z>
constexpr int rows_for() { return Z == 1 ? 12 : 24 / Z; }

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
// of `cols` columns, a multiple of 16: b and c start at its first column.
void gemm_block(int64_t rows, int64_t cols, int64_t kb, GemmArgs g) {
  g.b += kb * kCols * 2;
  g.c += kb * kCols;
  switch (std::min<int64_t>(cols - kb * kCols, kCols) / kLanes) {
    case 1: return gemm_rows<1>(rows, g);
    case 2: return gemm_rows<2>(rows, g);
    case 3: return gemm_rows<3>(rows, g);
    default: return gemm_rows<4>(rows, g);
  }
}

// Column blocks of the micro-kernel in `cols` columns.
int64_t column_blocks(int64_t cols) { return (cols + kCols - 1) / kCols; }

RF_AVX512BF16 inline __m512 load16(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

RF_AVX512BF16 inline void store16(uint16_t* p, __m512 v) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  std::memcpy(p, &h, sizeof h);
}

// The transformed input patch of a tile, channels c0 .. c0 + 16, its pixels at rows
// (Tile::rows).
RF_AVX512BF16 inline void transformed_patch(__m512 v[16], const uint16_t* const rows[16],
                                            int64_t c0) {
  __m512 d[16];
  for (int e = 0; e < kPoints; ++e) d[e] = load16(rows[e] + c0);
  input_transform(v, d);
}

// The gradient of a tile's 16 products, channels k0 .. k0 + 16, its output gradient's pixels
// at rows (Tile::rows).
RF_AVX512BF16 inline void transformed_grad(__m512 z[16], const uint16_t* const rows[4],
                                           int64_t k0) {
  __m512 y[4];
  for (int i = 0; i < 4; ++i) y[i] = load16(rows[i] + k0);
  grad_transform(z, y);
}

// ---------------------------------------------------------------- forward
// The outputs of tile t from its products m (point e's at m + e * point_stride), plus bias.
RF_AVX512BF16 void output_tile(uint16_t* y, int64_t K, const Tiles& g, int64_t t,
                               const float* m, int64_t point_stride, const float* bias) {
  const Tile tile(g, t);
  int64_t px[4];
  tile.outputs(px);
  y += tile.image(K);
  for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
    __m512 points[16], out[4];
    for (int e = 0; e < kPoints; ++e) points[e] = _mm512_loadu_ps(m + e * point_stride + k0);
    output_transform(out, points, bias ? _mm512_loadu_ps(bias + k0) : _mm512_setzero_ps());
    for (int i = 0; i < 4; ++i)
      if (px[i] >= 0) store16(y + px[i] * K + k0, out[i]);
  }
}

RF_AVX512BF16 void input_tile(uint16_t* v, int64_t point_stride, const uint16_t* x, int64_t C,
                              const Tiles& g, int64_t t, const uint16_t* zeros) {
  const uint16_t* rows[kPoints];
  Tile(g, t).rows<kPoints>(rows, x, C, zeros);
  for (int64_t c0 = 0; c0 < C; c0 += kLanes) {
    __m512 u[16];
    transformed_patch(u, rows, c0);
    for (int e = 0; e < kPoints; ++e) store16(v + e * point_stride + c0, u[e]);
  }
}

// y (channels-last, Cout channels) = conv3x3(x (Cin channels), weights) + bias, with the
// weights transformed: u[point][Cin / 2][Cout][2].
struct Forward {
  uint16_t* y;
  int64_t Cout;
  const uint16_t* x;
  int64_t Cin;
  Tiles g;
  const uint16_t* u;
  const float* bias;
  const uint16_t* zeros;  // ZeroRow of Cin

  // Tiles [t0, t0 + n) through v and m, by `parts` threads of which the caller is `part`
  // (chunk_phases).
  void chunk(int64_t t0, int64_t n, Points<uint16_t> v, Points<float> m, int part,
             int parts) const {
    chunk_phases(
        n, column_blocks(Cout), part, parts,
        [&](int64_t i) { input_tile(v.data + i * Cin, v.stride, x, Cin, g, t0 + i, zeros); },
        [&](int64_t e, int64_t kb) {
          gemm_block(n, Cout, kb, {v.point(e), Cin, 2, u + e * (Cin / 2) * Cout * 2, 2 * Cout,
                                   Cin / 2, m.point(e), Cout, false});
        },
        [&](int64_t i) { output_tile(y, Cout, g, t0 + i, m.data + i * Cout, m.stride, bias); });
  }

  // Threads take whole chunks where the transformed weights fit in a core's cache next to
  // one; otherwise they share each chunk, each with its part of the weights.
  void run() const {
    const bool own = kPoints * Cin * Cout * 2 <= kOwnWeightBytes;
    const ChunkPlan plan(g.count(), kPoints * (2 * Cin + 4 * Cout),
                         own ? Sharing::own : Sharing::shared, kRows);
    const PointScratch<uint16_t> v(plan, Cin);
    const PointScratch<float> m(plan, Cout);
    plan.run([&](int64_t t0, int64_t n, int slot, int part, int parts) {
      chunk(t0, n, v.slot(slot), m.slot(slot), part, parts);
    });
  }
};

// ---------------------------------------------------------------- backward-weights
// 32 bf16 at out: a[0], b[0], a[1], b[1], ... (the pairs vdpbf16ps reads); Stream: past the
// caches (out 64-byte aligned).
template <bool Stream>
RF_AVX512BF16 inline void store_pairs(uint16_t* out, __m512 a, __m512 b) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // a in the low half
  const __m512i pairs = _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), both);
  if constexpr (Stream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), pairs);
  } else {
    _mm512_storeu_si512(out, pairs);
  }
}

// The transformed input (Grad false) or output gradient (Grad true) of tiles t and t + 1
// (zeros from `last` on), the points of Rows only, pair-interleaved: out[point][ch][2], the
// first of Rows' points at out. Each tile's results go to an array of its own (not through a
// pointer that picks one): GCC then keeps both in registers, and drops the loads and sums
// that points outside Rows would need.
template <bool Grad, bool Stream, class Rows = PointRows<0, 4>>
RF_AVX512BF16 void tile_pair(uint16_t* out, int64_t point_stride, const uint16_t* src,
                             int64_t channels, const Tiles& g, int64_t t, int64_t last,
                             const uint16_t* zeros) {
  constexpr int P = Grad ? 4 : kPoints;
  const uint16_t* rows[2][P];
  for (int i = 0; i < 2; ++i) {
    if (t + i < last) {
      Tile(g, t + i).rows<P>(rows[i], src, channels, zeros);
    } else {
      std::fill_n(rows[i], P, zeros);
    }
  }
  for (int64_t c0 = 0; c0 < channels; c0 += kLanes) {
    __m512 a[16], b[16];
    if constexpr (Grad) {
      transformed_grad(a, rows[0], c0);
      transformed_grad(b, rows[1], c0);
    } else {
      transformed_patch(a, rows[0], c0);
      transformed_patch(b, rows[1], c0);
    }
    for (int e = 4 * Rows::begin; e < 4 * Rows::end; ++e)
      store_pairs<Stream>(out + (e - 4 * Rows::begin) * point_stride + 2 * c0, a[e], b[e]);
  }
}

// du[point][C][K] (f32) = sum over tiles of the transformed input times the transformed
// output gradient; by chunks, each thread's own, or each thread its rows of points of every
// chunk, or shared by all. In a shared chunk each thread's GEMMs read what the others
// transformed, so a cached store of the next chunk's transforms first takes its line back
// from the core that read it last. Where the cores are far apart (a Zen 4 VM, in spells)
// that made the transforms 3x slower and the layer up to 1.6x, so shared chunks stream their
// transforms past the caches and the GEMMs read them from memory. Split by points, nothing
// passes between cores at all: each thread transforms its points of every tile (loading
// 3/4 of each input patch and all of its gradient) and its GEMMs read them from its own
// cache, which is faster than either (docs/kernels.md). The streamed stores are whole
// aligned lines: C and K are multiples of 16 and PointScratch's points start on a line.
struct BackwardWeights {
  const uint16_t* dy;
  int64_t K;
  const uint16_t* x;
  int64_t C;
  Tiles g;
  const uint16_t* zeros;  // ZeroRow of max(C, K)

  // Tiles [t0, t0 + n) through v and z, added onto du; by `parts` threads of which the
  // caller is `part`.
  void chunk(int64_t t0, int64_t n, Points<uint16_t> v, Points<uint16_t> z, float* du, int part,
             int parts) const {
    const int64_t pairs = (n + 1) / 2;
    const auto transform = [&](int64_t p, auto stream) {
      constexpr bool kStream = decltype(stream)::value;
      tile_pair<false, kStream>(v.data + p * 2 * C, v.stride, x, C, g, t0 + 2 * p, g.count(), zeros);
      tile_pair<true, kStream>(z.data + p * 2 * K, z.stride, dy, K, g, t0 + 2 * p, g.count(), zeros);
    };
    chunk_phases(
        pairs, column_blocks(K), part, parts,
        [&](int64_t p) {
          parts > 1 ? transform(p, std::true_type()) : transform(p, std::false_type());
        },
        [&](int64_t e, int64_t kb) {
          gemm_block(C, K, kb, {v.point(e), 2, 2 * C, z.point(e), 2 * K, pairs, du + e * C * K,
                                K, true});
        },
        [](int64_t) {});
  }

  // Tiles [t0, t0 + n) through v and z, Rows' points only (the first at v.point(0)), added
  // onto those of du; by the calling thread alone.
  template <class Rows>
  void point_chunk(int64_t t0, int64_t n, Points<uint16_t> v, Points<uint16_t> z, float* du,
                   Rows) const {
    const int64_t pairs = (n + 1) / 2, last = g.count();
    for (int64_t p = 0; p < pairs; ++p) {
      tile_pair<false, false, Rows>(v.data + p * 2 * C, v.stride, x, C, g, t0 + 2 * p, last, zeros);
      tile_pair<true, false, Rows>(z.data + p * 2 * K, z.stride, dy, K, g, t0 + 2 * p, last, zeros);
    }
    for (int64_t e = 0; e < 4 * (Rows::end - Rows::begin); ++e)
      for (int64_t kb = 0; kb < column_blocks(K); ++kb)
        gemm_block(C, K, kb, {v.point(e), 2, 2 * C, z.point(e), 2 * K, pairs,
                              du + (4 * Rows::begin + e) * C * K, K, true});
  }

  // Threads take whole chunks where a partial weight gradient of their own stays in a
  // core's cache; run() leaves plan.partials() partial sums in du, to be added. Otherwise
  // they split the points where they split them evenly, else share each chunk. A chunk holds
  // at least as many bytes of tiles as the threads' part of du (each chunk reads and writes
  // all of it: at 512 channels, 16 MB, that cost more than the GEMMs' own reads in 4 MB
  // chunks; docs/kernels.md), split by points at least kOwnChunkBytes.
  ChunkPlan plan() const {
    const int64_t du_bytes = kPoints * C * K * 4, tile_bytes = kPoints * 2 * (C + K);
    const int threads = omp_get_max_threads();
    if (du_bytes <= kOwnPartialBytes) return ChunkPlan(g.count(), tile_bytes, Sharing::own, 2);
    if (points_split_evenly(threads))
      return ChunkPlan(g.count(), tile_bytes, Sharing::points, 2,
                       std::max(kOwnChunkBytes, du_bytes / threads));
    return ChunkPlan(g.count(), tile_bytes, Sharing::shared, 2, std::max(kChunkBytes, du_bytes));
  }
  void run(const ChunkPlan& plan, float* du) const {
    const PointScratch<uint16_t> v(plan, C), z(plan, K);
    fill(View{du, DType::f32, {plan.partials() * kPoints * C * K}, {1}}, 0.0);
    plan.run([&](int64_t t0, int64_t n, int slot, int part, int parts) {
      if (plan.sharing == Sharing::points) {
        with_point_rows(part, parts, [&](auto rows) {
          point_chunk(t0, n, v.slot(slot), z.slot(slot), du, rows);
        });
      } else {
        chunk(t0, n, v.slot(slot), z.slot(slot), du + slot * kPoints * C * K, part, parts);
      }
    });
  }
};

// ---------------------------------------------------------------- weights
// u[point][in / 2][out][2] from f32 kernels laid out taps[in][3 * 3][out]; `turn` reads
// each kernel turned 180 degrees.
RF_AVX512BF16 void transform_pair(uint16_t* u, const float* taps, int64_t in_channels,
                                  int64_t out_channels, bool turn, int64_t pair) {
  for (int64_t o = 0; o < out_channels; o += kLanes) {
    __m512 points[2][16];
    for (int half = 0; half < 2; ++half) {
      __m512 g[9];
      for (int i = 0; i < 9; ++i)
        g[i] = _mm512_loadu_ps(taps + ((2 * pair + half) * 9 + (turn ? 8 - i : i)) * out_channels + o);
      weight_transform(points[half], g);
    }
    for (int e = 0; e < kPoints; ++e)
      store_pairs<false>(u + ((e * (in_channels / 2) + pair) * out_channels + o) * 2, points[0][e],
                         points[1][e]);
  }
}

// The GEMM operand of weights w (K, C, 3, 3): u[point][in / 2][out][2] with (in, out) =
// (c, k) for the forward; for backward-data, which convolves dy with w turned 180 degrees
// and its channels swapped, (in, out) = (k, c).
void transform_weights(uint16_t* u, const View& w, bool backward_data) {
  const int64_t K = w.shape[0], C = w.shape[1];
  const int64_t in_channels = backward_data ? K : C, out_channels = backward_data ? C : K;
  const ScratchBuffer taps = weight_taps(w, backward_data);
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < in_channels / 2; ++pair)
    transform_pair(u, static_cast<const float*>(taps.data()), in_channels, out_channels,
                   backward_data, pair);
}

// taps[c][3 * 3][k] = the weight gradient from du (copies partial sums of [point][C][K]).
RF_AVX512BF16 void weight_gradient_row(float* taps, const float* du, int copies, int64_t C,
                                       int64_t K, int64_t c) {
  for (int64_t k0 = 0; k0 < K; k0 += kLanes) {
    __m512 points[16], dg[9];
    for (int e = 0; e < kPoints; ++e) {
      points[e] = _mm512_setzero_ps();
      for (int i = 0; i < copies; ++i)
        points[e] += _mm512_loadu_ps(du + ((i * kPoints + e) * C + c) * K + k0);
    }
    weight_gradient(dg, points);
    for (int i = 0; i < 9; ++i) _mm512_storeu_ps(taps + (c * 9 + i) * K + k0, dg[i]);
  }
}

// The transformed weights of w, kept in its storage (cached_weights).
DerivedBuffer transformed_weights(const View& w, bool backward_data) {
  const size_t bytes = size_t(kPoints * w.shape[0] * w.shape[1]) * sizeof(uint16_t);
  return cached_weights(w, "winograd_weights", backward_data, bytes, [&](void* u) {
    transform_weights(static_cast<uint16_t*>(u), w, backward_data);
  });
}

// ---------------------------------------------------------------- when
const uint16_t* in_data(const StagedView& v) { return v.view().ptr<const uint16_t>(); }
uint16_t* out_data(const StagedView& v) { return v.view().ptr<uint16_t>(); }

bool applies(const View& in, const View& w, const View& out, const Conv2dParams& p) {
  return winograd_runs_here() && convolution_fits(in, w, out, p, DType::bf16, kLanes);
}

}  // namespace

// Where oneDNN runs bf16 on AMX its kernels beat this file's.
bool winograd_runs_here() {
  static const bool runs = cpu_native_bf16() && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                           !onednn_isa_has(dnnl::cpu_isa::avx512_core_amx);
  return runs;
}

bool winograd_forward(const View& y, const View& x, const View& w, const View* bias,
                      const Conv2dParams& p) {
  const int64_t K = y.dim() == 4 ? y.shape[1] : 0;
  if (!applies(x, w, y, p) || w.shape[0] != K || w.shape[1] != x.shape[1] || !bias_fits(bias, K))
    return false;
  ScratchBuffer bias_buf;
  const float* b = f32_bias(bias, K, bias_buf);
  const DerivedBuffer u = transformed_weights(w, /*backward_data=*/false);
  const StagedView in = channels_last(x, true, DType::bf16), out = channels_last(y, false, DType::bf16);
  const ZeroRow<uint16_t> zeros(x.shape[1]);
  Forward{out_data(out), K, in_data(in), x.shape[1], Tiles(x.shape[0], x.shape[2], x.shape[3]),
          static_cast<const uint16_t*>(u.data()), b, zeros.data()}.run();
  out.finish();
  return true;
}

bool winograd_backward_data(const View& dx, const View& dy, const View& w,
                            const Conv2dParams& p) {
  if (!applies(dy, w, dx, p) || w.shape[0] != dy.shape[1] || w.shape[1] != dx.shape[1])
    return false;
  const DerivedBuffer u = transformed_weights(w, /*backward_data=*/true);
  const StagedView in = channels_last(dy, true, DType::bf16), out = channels_last(dx, false, DType::bf16);
  const ZeroRow<uint16_t> zeros(dy.shape[1]);
  Forward{out_data(out), dx.shape[1], in_data(in), dy.shape[1],
          Tiles(dy.shape[0], dy.shape[2], dy.shape[3]), static_cast<const uint16_t*>(u.data()),
          nullptr, zeros.data()}.run();
  out.finish();
  return true;
}

bool winograd_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                               const Conv2dParams& p) {
  // At 2x2 and smaller, one tile per image: im2col + matmul (conv_gemm.cpp) is faster.
  if (!applies(x, dw, dy, p) || dw.shape[0] != dy.shape[1] || dw.shape[1] != x.shape[1] ||
      x.shape[2] * x.shape[3] <= 4 || !bias_fits(db, dy.shape[1]))
    return false;
  const int64_t K = dy.shape[1], C = x.shape[1];
  const StagedView grad = channels_last(dy, true, DType::bf16), in = channels_last(x, true, DType::bf16);
  const ZeroRow<uint16_t> zeros(std::max(C, K));
  const BackwardWeights products{in_data(grad), K, in_data(in), C,
                                 Tiles(x.shape[0], x.shape[2], x.shape[3]), zeros.data()};
  const ChunkPlan plan = products.plan();
  ScratchBuffer du_buf(size_t(plan.partials() * kPoints * C * K) * sizeof(float));
  float* du = static_cast<float*>(du_buf.data());
  products.run(plan, du);
  ScratchBuffer taps_buf(size_t(K * C * 9) * sizeof(float));
  float* taps = static_cast<float*>(taps_buf.data());
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) weight_gradient_row(taps, du, plan.partials(), C, K, c);
  store_weight_gradient(dw, taps);
  if (db) conv_bias_grad(*db, in_data(grad), dy.numel() / K, K);
  return true;
}

}  // namespace ringflow::cpu
