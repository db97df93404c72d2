// What the Winograd F(2x2, 3x3) convolutions share whatever their vector width and dtype
// (winograd.cpp: bf16 on AVX512-BF16; winograd_f32.cpp: f32 on AVX2): the tiles and their
// pixels, how chunks of tiles go to the threads, and the transforms' arithmetic, written
// once over GCC vector types (__m256, __m512) and inlined into each ISA's callers.
#pragma once

#include <omp.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/derived_buffer.h"
#include "ringflow/kernels/cpu/staged_view.h"

#define RF_WINOGRAD_INLINE inline __attribute__((always_inline))

namespace ringflow::cpu::winograd {

constexpr int kPoints = 16;  // a tile's 4x4 points in the transformed domain
// Tiles per chunk: their transformed operands take about this many bytes (tuned on Zen 5
// for bf16: 1 MB of L2 per core, 32 MB of L3). A thread takes whole chunks of its own where
// the transformed weights (forward) or its partial weight gradient (backward) are small
// enough to stay in its cache next to them; otherwise they share each chunk, or split its
// points (backward-weights: Sharing).
constexpr int64_t kChunkBytes = 4 << 20;
constexpr int64_t kOwnChunkBytes = 512 << 10;
constexpr int64_t kOwnWeightBytes = 4 << 20;
constexpr int64_t kOwnPartialBytes = 512 << 10;

// ---------------------------------------------------------------- tiles
// Output tile t covers output pixels (2*th + i, 2*tw + j), i, j in {0, 1}; its input patch
// is rows 2*th - 1 .. 2*th + 2 and columns alike (pad 1), zeros outside the image.
struct Tiles {
  int64_t N, H, W, TH, TW;
  Tiles(int64_t n, int64_t h, int64_t w) : N(n), H(h), W(w), TH((h + 1) / 2), TW((w + 1) / 2) {}
  int64_t count() const { return N * TH * TW; }
};

// One tile's place: at(dy, dx) is the pixel (2*th + dy, 2*tw + dx) of image n, counted
// within the image, or -1 outside it.
struct Tile {
  int64_t n, h, w;  // h, w: the output tile's top-left pixel
  const Tiles* g;
  Tile(const Tiles& tiles, int64_t t)
      : n(t / (tiles.TH * tiles.TW)),
        h(2 * (t % (tiles.TH * tiles.TW) / tiles.TW)),
        w(2 * (t % tiles.TW)),
        g(&tiles) {}
  int64_t at(int64_t dy, int64_t dx) const {
    const int64_t y = h + dy, x = w + dx;
    return y < 0 || y >= g->H || x < 0 || x >= g->W ? -1 : y * g->W + x;
  }
  // at() of the input patch's 16 pixels and of the output tile's 4 (row-major): looked up
  // once per tile, not once per block of channels.
  void patch(int64_t px[16]) const {
    for (int e = 0; e < kPoints; ++e) px[e] = at(e / 4 - 1, e % 4 - 1);
  }
  void outputs(int64_t px[4]) const {
    for (int i = 0; i < 4; ++i) px[i] = at(i / 2, i % 2);
  }
  // Where image n begins in a dense channels-last activation of `channels` channels.
  int64_t image(int64_t channels) const { return n * g->H * g->W * channels; }
  // Where the input patch's pixels (P = 16) or the output tile's (P = 4) begin in the dense
  // channels-last activation a of `channels` channels, `zeros` for those outside the image:
  // the transforms' loads then need neither a test nor a multiply per block of channels.
  template <int P, class T>
  void rows(const T* r[P], const T* a, int64_t channels, const T* zeros) const {
    static_assert(P == kPoints || P == 4);
    int64_t px[P];
    if constexpr (P == kPoints) {
      patch(px);
    } else {
      outputs(px);
    }
    a += image(channels);
    for (int e = 0; e < P; ++e) r[e] = px[e] < 0 ? zeros : a + px[e] * channels;
  }
};

// A row of zeros as long as a pixel of the widest activation a convolution reads: what
// Tile::rows gives for pixels outside the image.
template <class T>
class ZeroRow {
 public:
  explicit ZeroRow(int64_t channels) : buffer_(size_t(channels) * sizeof(T)) {
    std::memset(buffer_.data(), 0, size_t(channels) * sizeof(T));
  }
  const T* data() const { return static_cast<const T*>(buffer_.data()); }

 private:
  ScratchBuffer buffer_;
};

// [begin, end) of `part` when n items are split into `parts`.
struct Range {
  int64_t begin, end;
  Range(int64_t n, int part, int parts) : begin(n * part / parts), end(n * (part + 1) / parts) {}
};

// How threads share a convolution's chunks of tiles:
// - own: each thread takes whole chunks, with scratch of its own;
// - shared: all threads work on each chunk together, in one scratch, each its part of every
//   phase (chunk_phases);
// - points: each thread takes every chunk, with scratch of its own, and only its rows of the
//   tiles' 4x4 points (PointRows): nothing passes between the threads.
enum class Sharing { own, shared, points };

// In points sharing, whether the threads split the 4 rows of points evenly.
inline bool points_split_evenly(int threads) { return threads > 0 && 4 % threads == 0; }

// How a convolution's tiles go to the threads, in chunks of `rows` tiles (a multiple of
// `multiple`) whose transformed operands (`bytes_per_tile` for all 16 points; a slot holds
// `points` of them) take about kOwnChunkBytes (own) or `budget` (shared, points). Own chunks
// are small enough that every thread gets some. A slot of scratch holds `capacity` rows, the
// budget's whatever the batch, so that the memory a step takes grows with the batch as its
// activations do (apps/step_memory.h fits it from two small batches).
struct ChunkPlan {
  Sharing sharing;
  int64_t tiles, rows, chunks, capacity;
  int slots, points;
  ChunkPlan(int64_t tile_count, int64_t bytes_per_tile, Sharing how, int64_t multiple,
            int64_t budget = kChunkBytes)
      : sharing(how), tiles(tile_count) {
    const int threads = omp_get_max_threads();
    if (sharing == Sharing::points && !points_split_evenly(threads))
      throw std::logic_error("winograd: " + std::to_string(threads) + " threads split no points");
    const bool own = sharing == Sharing::own;
    slots = sharing == Sharing::shared ? 1 : threads;
    points = sharing == Sharing::points ? kPoints / threads : kPoints;
    const int64_t slot_bytes = std::max<int64_t>(1, bytes_per_tile * points / kPoints);
    const int64_t bytes = own ? kOwnChunkBytes : budget;
    capacity = rows = std::max(multiple, bytes / slot_bytes / multiple * multiple);
    if (own) rows = std::min(rows, round_up((tiles + threads - 1) / threads, multiple));
    chunks = (tiles + rows - 1) / rows;
  }
  static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
  // How many partial sums threads that accumulate over chunks leave: one per own slot.
  int partials() const { return sharing == Sharing::own ? slots : 1; }

  // body(t0, n, slot, part, parts) for every chunk [t0, t0 + n): with own chunks by one
  // thread (its scratch slot, part 0 of 1); shared, by all threads of the team together
  // (slot 0); by points, by every thread (its slot, its part of the slots' parts: all of
  // them even if the team is smaller than planned).
  template <class Body>
  void run(const Body& body) const {
#pragma omp parallel
    {
      const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
      const bool own = sharing == Sharing::own;
      for (int64_t i = own ? tid : 0; i < chunks; i += own ? nt : 1) {
        const int64_t t0 = i * rows, n = std::min(rows, tiles - t0);
        switch (sharing) {
          case Sharing::own: body(t0, n, tid, 0, 1); break;
          case Sharing::shared: body(t0, n, 0, tid, nt); break;
          case Sharing::points:
            for (int part = tid; part < slots; part += nt) body(t0, n, tid, part, slots);
            break;
        }
      }
    }
  }
};

// Rows [Begin, End) of a tile's 4x4 points, as a type: the transforms compute those alone.
template <int Begin, int End>
struct PointRows {
  static constexpr int begin = Begin, end = End;
};

// f(PointRows<...>()) with part `part` of `parts` of the rows of points; parts splits them
// evenly (ChunkPlan's slots in points sharing).
template <class F>
void with_point_rows(int part, int parts, const F& f) {
  if (!points_split_evenly(parts))
    throw std::logic_error("winograd: 4 rows of points split in " + std::to_string(parts));
  const Range rows(4, part, parts);
  switch (rows.begin * 8 + rows.end) {
    case 0 * 8 + 4: return f(PointRows<0, 4>());
    case 0 * 8 + 2: return f(PointRows<0, 2>());
    case 2 * 8 + 4: return f(PointRows<2, 4>());
    case 0 * 8 + 1: return f(PointRows<0, 1>());
    case 1 * 8 + 2: return f(PointRows<1, 2>());
    case 2 * 8 + 3: return f(PointRows<2, 3>());
    case 3 * 8 + 4: return f(PointRows<3, 4>());
    default: throw std::logic_error("winograd: no point rows for part " + std::to_string(part) +
                                    " of " + std::to_string(parts));
  }
}

// One slot of a chunk's transformed operands of one kind: point e's rows at point(e).
template <class T>
struct Points {
  T* data;
  int64_t stride;
  T* point(int64_t e) const { return data + e * stride; }
};

// Scratch for a plan's slots of transformed operands, `capacity` rows of `row` elements of T
// per point, each point starting on a cache line. The points lie an odd number of lines
// apart, so that the 16 stores a transform makes together fall in different cache sets (a
// power of two apart, as the budget made them in backward-weights, they all fell in one:
// that layer 10-13% slower).
template <class T>
class PointScratch {
 public:
  PointScratch(const ChunkPlan& plan, int64_t row)
      : stride_((lines(plan.capacity * row) | 1) * kLine),
        points_(plan.points),
        buffer_(size_t(plan.slots * points_ * stride_) * sizeof(T)) {}
  Points<T> slot(int s) const {
    return {static_cast<T*>(buffer_.data()) + s * points_ * stride_, stride_};
  }

 private:
  static constexpr int64_t kLine = 64 / sizeof(T);
  static int64_t lines(int64_t elements) { return (elements + kLine - 1) / kLine; }
  int64_t stride_;
  int points_;
  ScratchBuffer buffer_;
};

// Whether in (N, reduced, H, W) and out (N, produced, H, W) are the activations of a 3x3
// stride-1 pad-1 convolution with weights w, all of `dtype`, with channel counts a multiple
// of `lanes`: the layers these kernels compute under --conv-algo auto.
inline bool convolution_fits(const View& in, const View& w, const View& out,
                             const Conv2dParams& p, DType dtype, int64_t lanes) {
  if (conv_algorithm() != ConvAlgorithm::automatic) return false;
  if (in.dtype != dtype || out.dtype != dtype || w.dtype != dtype) return false;
  if (in.dim() != 4 || out.dim() != 4 || w.dim() != 4 || w.shape[2] != 3 || w.shape[3] != 3)
    return false;
  const bool geometry = p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 &&
                        p.dilation_w == 1 && p.pad_top == 1 && p.pad_bottom == 1 &&
                        p.pad_left == 1 && p.pad_right == 1;
  return geometry && in.shape[0] == out.shape[0] && in.shape[2] == out.shape[2] &&
         in.shape[3] == out.shape[3] && in.shape[1] % lanes == 0 && out.shape[1] % lanes == 0 &&
         in.numel() > 0 && out.numel() > 0 && dnnl_friendly({&w});
}

// A bias or its gradient of K values.
inline bool bias_fits(const View* b, int64_t K) {
  return !b || (b->dim() == 1 && b->shape[0] == K && dnnl_friendly({b}));
}

// Weights w (K, C, 3, 3) as f32 taps[in][3 * 3][out]: (in, out) = (c, k) for the forward;
// for backward-data, which convolves dy with w turned 180 degrees and its channels swapped,
// (in, out) = (k, c), the turn left to the reader.
inline ScratchBuffer weight_taps(const View& w, bool backward_data) {
  const int64_t K = w.shape[0], C = w.shape[1];
  ScratchBuffer taps(size_t(K * C * 9) * sizeof(float));
  const Shape strides = backward_data ? Shape{9 * C, 1, 3 * C, C} : Shape{1, 9 * K, 3 * K, K};
  move_weights(View{taps.data(), DType::f32, w.shape, strides}, w, "winograd weights");
  return taps;
}

// dw (K, C, 3, 3) = taps[c][3 * 3][k] (f32).
inline void store_weight_gradient(const View& dw, const float* taps) {
  const int64_t K = dw.shape[0];
  move_weights(dw, View{const_cast<float*>(taps), DType::f32, dw.shape, {1, 9 * K, 3 * K, K}},
               "winograd weights");
}

// Runs `rows` rows of a micro-kernel R rows at a time, then the rest at once:
// kernel(std::integral_constant<int, r>()) for each block of r rows, advance(R) after each
// full block.
template <int R, class Kernel>
void row_tail(int rows, const Kernel& kernel) {
  if constexpr (R > 0) {
    if (rows == R) return kernel(std::integral_constant<int, R>());
    row_tail<R - 1>(rows, kernel);
  }
}
template <int R, class Kernel, class Advance>
void row_blocks(int64_t rows, const Kernel& kernel, const Advance& advance) {
  for (; rows >= R; rows -= R) {
    kernel(std::integral_constant<int, R>());
    advance(R);
  }
  row_tail<R - 1>(int(rows), kernel);
}

// The transformed weights of w (`bytes` of them, made by derive(data)), kept in w's storage
// under `name` while its version holds; forward and backward-data (w turned) apart.
template <class Derive>
DerivedBuffer cached_weights(const View& w, const char* name, bool backward_data, size_t bytes,
                             const Derive& derive) {
  const std::string key = KeyBuilder(name)
                              .add(reinterpret_cast<int64_t>(w.data))
                              .add(w)
                              .add(int64_t(backward_data))
                              .str();
  return DerivedBuffer(w, key, bytes, derive);
}

// One chunk's work, by `parts` threads of which the caller is `part` (they all call it):
// transform(i) for i < items, then gemm(e, kb) for each point e and column block kb < blocks,
// then finish(i) for i < items, each thread its share, with a barrier between the phases
// where threads share the chunk (after a fence: transforms may stream their stores past the
// caches). The next chunk's transforms may overlap this one's finish: they write the
// transformed operands, which finish no longer reads.
template <class Transform, class Gemm, class Finish>
void chunk_phases(int64_t items, int64_t blocks, int part, int parts, const Transform& transform,
                  const Gemm& gemm, const Finish& finish) {
  for (Range r(items, part, parts); r.begin < r.end; ++r.begin) transform(r.begin);
  if (parts > 1) {
    _mm_sfence();
#pragma omp barrier
  }
  for (Range r(kPoints * blocks, part, parts); r.begin < r.end; ++r.begin)
    gemm(r.begin / blocks, r.begin % blocks);
  if (parts > 1) {
#pragma omp barrier
  }
  for (Range r(items, part, parts); r.begin < r.end; ++r.begin) finish(r.begin);
}

// Activation v as the kernels read and write it: v itself where it is channels-last (or in
// `also`, a blocked layout they address too), else a dense channels-last copy of `dtype`.
inline StagedView channels_last(const View& v, bool is_input, DType dtype,
                                MemoryLayout also = MemoryLayout::strided) {
  const bool fits = v.is_channels_last() || (also != MemoryLayout::strided && v.layout == also);
  return StagedView(v, !fits, dtype, channels_last_strides(v.shape), is_input);
}

// A bias of K values (any dtype, any stride) as f32, copied into `buffer`; null without one.
inline const float* f32_bias(const View* bias, int64_t K, ScratchBuffer& buffer) {
  if (!bias) return nullptr;
  buffer = ScratchBuffer(size_t(K) * sizeof(float));
  copy(View{buffer.data(), DType::f32, {K}, {1}}, *bias);
  return static_cast<const float*>(buffer.data());
}

// ---------------------------------------------------------------- transforms
// Each on as many channels at once as V has lanes.

// v = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: the 16 points of an input patch.
template <class V>
RF_WINOGRAD_INLINE void input_transform(V v[16], const V d[16]) {
  V t[16];
  for (int j = 0; j < 4; ++j) {
    t[0 + j] = d[0 + j] - d[8 + j];
    t[4 + j] = d[4 + j] + d[8 + j];
    t[8 + j] = d[8 + j] - d[4 + j];
    t[12 + j] = d[4 + j] - d[12 + j];
  }
  for (int i = 0; i < 4; ++i) {
    const V* r = t + 4 * i;
    v[4 * i + 0] = r[0] - r[2];
    v[4 * i + 1] = r[1] + r[2];
    v[4 * i + 2] = r[2] - r[1];
    v[4 * i + 3] = r[1] - r[3];
  }
}

// z = A dY A^T for a 2x2 output gradient dy (row-major), A = [1 0; 1 1; 1 -1; 0 -1]: the
// gradient of a tile's 16 products.
template <class V>
RF_WINOGRAD_INLINE void grad_transform(V z[16], const V dy[4]) {
  V r[8];  // A dY: 4 x 2
  for (int j = 0; j < 2; ++j) {
    r[0 + j] = dy[j];
    r[2 + j] = dy[j] + dy[2 + j];
    r[4 + j] = dy[j] - dy[2 + j];
    r[6 + j] = -dy[2 + j];
  }
  for (int i = 0; i < 4; ++i) {
    z[4 * i + 0] = r[2 * i];
    z[4 * i + 1] = r[2 * i] + r[2 * i + 1];
    z[4 * i + 2] = r[2 * i] - r[2 * i + 1];
    z[4 * i + 3] = -r[2 * i + 1];
  }
}

// y = A^T m A + bias, A^T = [1 1 1 0; 0 1 -1 -1]: a tile's 2x2 outputs (row-major) from its
// 16 products.
template <class V>
RF_WINOGRAD_INLINE void output_transform(V y[4], const V m[16], const V& bias) {
  V s[8];  // A^T m: 2 x 4
  for (int j = 0; j < 4; ++j) {
    s[j] = m[0 + j] + m[4 + j] + m[8 + j];
    s[4 + j] = m[4 + j] - m[8 + j] - m[12 + j];
  }
  for (int i = 0; i < 2; ++i) {
    const V* r = s + 4 * i;
    y[2 * i + 0] = r[0] + r[1] + r[2] + bias;
    y[2 * i + 1] = r[1] - r[2] - r[3] + bias;
  }
}

// u = G g G^T for 3x3 kernels g (row-major), G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
template <class V>
RF_WINOGRAD_INLINE void weight_transform(V u[16], const V g[9]) {
  const V half = V{} + 0.5f;
  V t[12];  // G g: 4 x 3
  for (int j = 0; j < 3; ++j) {
    t[0 + j] = g[j];
    t[3 + j] = half * (g[j] + g[3 + j] + g[6 + j]);
    t[6 + j] = half * (g[j] - g[3 + j] + g[6 + j]);
    t[9 + j] = g[6 + j];
  }
  for (int i = 0; i < 4; ++i) {
    const V* r = t + 3 * i;
    u[4 * i + 0] = r[0];
    u[4 * i + 1] = half * (r[0] + r[1] + r[2]);
    u[4 * i + 2] = half * (r[0] - r[1] + r[2]);
    u[4 * i + 3] = r[2];
  }
}

// dg = G^T du G: the gradient of 3x3 kernels from that of their 16 transformed points.
template <class V>
RF_WINOGRAD_INLINE void weight_gradient(V dg[9], const V du[16]) {
  const V half = V{} + 0.5f;
  V t[12];  // G^T du: 3 x 4
  for (int j = 0; j < 4; ++j) {
    t[0 + j] = du[j] + half * (du[4 + j] + du[8 + j]);
    t[4 + j] = half * (du[4 + j] - du[8 + j]);
    t[8 + j] = half * (du[4 + j] + du[8 + j]) + du[12 + j];
  }
  for (int i = 0; i < 3; ++i) {
    const V* r = t + 4 * i;
    dg[3 * i + 0] = r[0] + half * (r[1] + r[2]);
    dg[3 * i + 1] = half * (r[1] - r[2]);
    dg[3 * i + 2] = half * (r[1] + r[2]) + r[3];
  }
}

}  // namespace ringflow::cpu::winograd
