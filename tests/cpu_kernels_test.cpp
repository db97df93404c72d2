// cpu_backend() against reference_backend(): every overridden kernel over a shape sweep
// with sizes 1, odd and prime, NCHW and channels-last operands, f32, bf16 and f16 (f16
// widened to f32 inside the kernels); plus the oneDNN caches (no rebuilt primitive on a
// repeated call, weights reordered again when the version changes). Timing never decides a test.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/dnnl_context.h"
#include "ringflow/kernels/derived_cache.h"
#include "ringflow/tests/kernel_sweep.h"

namespace ringflow {
namespace {

using namespace sweep;

const Backend& cpu() { return cpu_backend(); }
const Backend& ref() { return reference_backend(); }

// ---------------------------------------------------------------- conv
TEST_CASE("conv2d forward / backward-data / backward-weights match the reference") {
  // f16: through the f32 kernels (kernels/cpu/widen.h), as oneDNN has none on this ISA.
  CHECK(sweep_conv(cpu(), {DType::f32, DType::bf16, DType::f16}, /*large=*/true));
}

// The shapes of VGG/ResNet's 3x3 layers, where ConvAlgorithm::automatic lets oneDNN pick
// Winograd on AVX-512 machines: both algorithms within the same tolerance of the reference.
TEST_CASE("conv2d at Winograd shapes, automatic and direct, match the reference") {
  const ConvAlgorithmGuard guard(conv_algorithm());
  std::mt19937 rng(2);
  for (ConvAlgorithm algorithm : {ConvAlgorithm::automatic, ConvAlgorithm::direct}) {
    set_conv_algorithm(algorithm);
    for (Layout layout : {Layout::nhwc, Layout::nchw}) {
      ConvCase c{32, 64, 64, 16, 16, 3, 3, {}, layout, layout, DType::f32};
      c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
      CHECK(check_conv(cpu(), c, rng));
    }
  }
  CHECK(std::string(conv_algorithm_name(ConvAlgorithm::direct)) == "direct");
  CHECK(std::string(conv_algorithm_name(ConvAlgorithm::automatic)) == "auto");
}

// check_conv of 3x3 pad-1 layers (N, C, K, H, W), channels-last, each with its count of threads.
using ThreadsAndShape = std::pair<int, std::array<int64_t, 5>>;
void check_with_threads(DType dtype, std::initializer_list<ThreadsAndShape> runs, std::mt19937& rng) {
  const int threads = num_threads();
  for (const auto& [t, shape] : runs) {
    set_num_threads(t);
    const auto [N, C, K, H, W] = shape;
    ConvCase c{N, C, K, H, W, 3, 3, {}, Layout::nhwc, Layout::nhwc, dtype};
    c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
    CAPTURE(t);
    CAPTURE(C);
    CHECK(check_conv(cpu(), c, rng));
  }
  set_num_threads(threads);
}

// bf16 convolutions that oneDNN runs (stride 2, 1x1) take channels-last activations as they
// are where oneDNN has a JIT kernel for them: no reorder in or out, forward or backward
// (conv.cpp's in_own_layout). A first layer's NCHW image is not channels-last, so that one
// computes blocked, its operands reordered; a one-channel image is both, and then oneDNN's
// kernels decide (only the result is checked).
TEST_CASE("bf16 channels-last convolutions on oneDNN reorder no activations") {
  if (!cpu_native_bf16() || cpu::onednn_isa_has(dnnl::cpu_isa::avx512_core_amx)) {
    MESSAGE("not checked: without native bf16 these run widened to f32; on AMX, blocked");
    return;
  }
  std::mt19937 rng(5);
  const auto reorders = [] { return cpu::dnnl_cache_stats().activation_reorders; };
  enum class Reorders { none, some, unchecked };
  const auto conv = [](int64_t C, int64_t K, int64_t H, int64_t W, int64_t R, int stride,
                       Layout lx) {
    ConvCase c{2, C, K, H, W, R, R, {}, lx, Layout::nhwc, DType::bf16};
    c.p.stride_h = c.p.stride_w = stride;
    c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = R / 2;
    return c;
  };
  const std::pair<ConvCase, Reorders> cases[] = {
      {conv(32, 64, 9, 8, 3, 2, Layout::nhwc), Reorders::none},
      {conv(32, 64, 8, 8, 1, 2, Layout::nhwc), Reorders::none},
      {conv(64, 32, 7, 7, 1, 1, Layout::nhwc), Reorders::none},
      {conv(3, 32, 8, 8, 3, 1, Layout::nchw), Reorders::some},
      {conv(1, 32, 8, 8, 3, 1, Layout::nchw), Reorders::unchecked}};
  for (const auto& [c, expected] : cases) {
    CAPTURE(conv_name(c));
    const size_t before = reorders();
    CHECK(check_conv(cpu(), c, rng));
    if (expected != Reorders::unchecked)
      CHECK((reorders() > before) == (expected == Reorders::some));
  }
}

// Weights in strides other than OIHW (channels-last OHWI here) are read and their gradient
// written through those strides (winograd_tiles.h's weight_taps, store_weight_gradient),
// against the reference on the same views; and these shapes take the Winograd kernels.
void check_strided_weights(DType dt, decltype(&cpu::winograd_forward) forward,
                           decltype(&cpu::winograd_backward_data) backward_data,
                           decltype(&cpu::winograd_backward_weights) backward_weights,
                           std::mt19937& rng) {
  ConvCase c{2, 32, 48, 6, 6, 3, 3, {}, Layout::nhwc, Layout::nhwc, dt, Layout::nhwc};
  c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
  CHECK(check_conv(cpu(), c, rng));
  Buf x = random({c.N, c.C, c.H, c.W}, dt, Layout::nhwc, rng);
  Buf y = make({c.N, c.K, c.H, c.W}, dt, Layout::nhwc);
  Buf w = random({c.K, c.C, 3, 3}, dt, Layout::nhwc, rng);
  CHECK(forward(y.v, x.v, w.v, nullptr, c.p));
  CHECK(backward_data(x.v, y.v, w.v, c.p));
  CHECK(backward_weights(w.v, nullptr, y.v, x.v, c.p));
}

TEST_CASE("bf16 3x3 convolutions by Winograd F(2x2, 3x3) match the reference") {
  if (!cpu::winograd_runs_here()) {
    MESSAGE("not checked: Winograd runs on CPUs with AVX512-BF16 and no AMX only");
    return;
  }
  const ConvAlgorithmGuard guard(ConvAlgorithm::automatic);
  std::mt19937 rng(3);
  // Odd sizes leave half-empty tiles, and an odd count of them a zero tile in
  // backward-weights (5x5); 1x1 images a single one; more channels than one micro-kernel
  // column block of 32, and a last block of 16 (48 channels, and 16 for dx); threads with
  // chunks of their own (64 channels) or not (512x512 weights: forward, whose threads share
  // each chunk; 128x128: backward-weights, whose threads split each chunk's points with 1, 2
  // or 4 of them, and whose 576 tiles leave a short last chunk); and NCHW operands, which go
  // through a channels-last copy.
  const int64_t shapes[][5] = {{2, 16, 48, 7, 9},   {3, 48, 64, 8, 8},   {1, 64, 32, 1, 1},
                               {5, 32, 96, 4, 5},   {1, 16, 32, 5, 5},   {1, 64, 64, 32, 32},
                               {2, 512, 512, 3, 5}, {9, 128, 128, 16, 16}};
  for (const auto& [N, C, K, H, W] : shapes) {
    const Layout layout = N == 9 || N == 5 ? Layout::nchw : Layout::nhwc;
    ConvCase c{N, C, K, H, W, 3, 3, {}, layout, layout, DType::bf16};
    c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
    CHECK(check_conv(cpu(), c, rng));
    // That these shapes take the Winograd path, not oneDNN's.
    Buf x = random({N, C, H, W}, DType::bf16, Layout::nhwc, rng);
    Buf w = random({K, C, 3, 3}, DType::bf16, Layout::nchw, rng);
    Buf y = make({N, K, H, W}, DType::bf16, Layout::nhwc);
    CHECK(cpu::winograd_forward(y.v, x.v, w.v, nullptr, c.p));
    CHECK(cpu::winograd_backward_data(x.v, y.v, w.v, c.p));
    CHECK(cpu::winograd_backward_weights(w.v, nullptr, y.v, x.v, c.p) == (H * W > 4));
  }
  // The transformed weights are kept with their storage and made again on a new version.
  {
    const size_t entries_before = cpu::dnnl_cache_stats().weight_entries;
    const int64_t N = 2, C = 32, K = 32, H = 6, W = 6;
    ConvCase c{N, C, K, H, W, 3, 3, {}, Layout::nhwc, Layout::nhwc, DType::bf16};
    c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
    Buf x = random({N, C, H, W}, DType::bf16, Layout::nhwc, rng);
    Buf w = random({K, C, 3, 3}, DType::bf16, Layout::nchw, rng);
    auto derived = std::make_unique<DerivedCache>();
    w.v.derived = derived.get();
    w.v.version = 1;
    Buf y1 = make({N, K, H, W}, DType::bf16, Layout::nhwc), y2 = like(y1);
    CHECK(cpu::winograd_forward(y1.v, x.v, w.v, nullptr, c.p));
    CHECK(cpu::dnnl_cache_stats().weight_entries == entries_before + 1);
    randomize(w.v, rng);
    w.v.version = 2;
    CHECK(cpu::winograd_forward(y1.v, x.v, w.v, nullptr, c.p));
    ref().conv2d_forward(y2.v, x.v, w.v, nullptr, c.p);
    CHECK(close(y1.v, y2.v, rtol_of(DType::bf16), atol_of(DType::bf16, C * 9.0), "after version bump"));
    CHECK(cpu::dnnl_cache_stats().weight_entries == entries_before + 1);
    derived.reset();
    CHECK(cpu::dnnl_cache_stats().weight_entries == entries_before);
  }
  // Backward-weights' threads split each chunk's points where they split them evenly (1, 2
  // and 4 threads), else share each chunk (3): every way against the reference, with weights
  // past a thread's own partial sums. 11x96x96x5x5: 99 tiles, two chunks with 1 thread, the
  // last of an odd count; 9x128x128x16x16: 576 tiles, two shared chunks with 3 threads and
  // three by points with 4 (and four and a half with 2, above).
  check_with_threads(DType::bf16, {{1, {11, 96, 96, 5, 5}},
                                   {2, {11, 96, 96, 5, 5}},
                                   {3, {11, 96, 96, 5, 5}},
                                   {4, {11, 96, 96, 5, 5}},
                                   {3, {9, 128, 128, 16, 16}},
                                   {4, {9, 128, 128, 16, 16}}},
                     rng);
  check_strided_weights(DType::bf16, cpu::winograd_forward, cpu::winograd_backward_data,
                        cpu::winograd_backward_weights, rng);
  // Not for other geometries or with the direct algorithm asked for.
  Buf x = random({2, 16, 8, 8}, DType::bf16, Layout::nhwc, rng);
  Buf w = random({32, 16, 3, 3}, DType::bf16, Layout::nchw, rng);
  Buf y = make({2, 32, 8, 8}, DType::bf16, Layout::nhwc);
  Conv2dParams unpadded;
  CHECK_FALSE(cpu::winograd_forward(y.v, x.v, w.v, nullptr, unpadded));
  Conv2dParams padded;
  padded.pad_top = padded.pad_bottom = padded.pad_left = padded.pad_right = 1;
  set_conv_algorithm(ConvAlgorithm::direct);
  CHECK_FALSE(cpu::winograd_forward(y.v, x.v, w.v, nullptr, padded));
}

// Where oneDNN runs below AVX-512 (an AVX2-only CPU, or cpu_kernels_avx2's
// ONEDNN_MAX_CPU_ISA=AVX2), f32 3x3 layers take our Winograd kernels, on activations in
// oneDNN's nChw8c (as the framework keeps them there), channels-last, or NCHW (a copy).
TEST_CASE("f32 3x3 convolutions by Winograd F(2x2, 3x3) match the reference") {
  if (!cpu::winograd_f32_runs_here()) {
    MESSAGE("not checked: f32 Winograd runs where the CPU has AVX2 and oneDNN no AVX-512");
    return;
  }
  const ConvAlgorithmGuard guard(ConvAlgorithm::automatic);
  std::mt19937 rng(4);
  // Odd sizes leave half-empty tiles, 1x1 images a single one; a last column block of 8
  // (24 and 40 channels); threads with chunks of their own or sharing each chunk (512x512
  // weights in the forward; 128x128 in backward-weights, whose 576 tiles leave a short last
  // chunk).
  const int64_t shapes[][5] = {{2, 8, 24, 7, 9},    {3, 40, 64, 8, 8},   {1, 64, 32, 1, 1},
                               {5, 32, 96, 4, 5},   {1, 16, 32, 5, 5},   {1, 64, 64, 32, 32},
                               {2, 512, 512, 3, 5}, {9, 128, 128, 16, 16}, {2, 256, 256, 8, 8},
                               {2, 64, 64, 32, 32}};
  for (const auto& [N, C, K, H, W] : shapes) {
    const Layout layout = N == 9 || N == 5 ? Layout::nchw : Layout::nhwc;
    ConvCase c{N, C, K, H, W, 3, 3, {}, layout, layout, DType::f32};
    c.p.pad_top = c.p.pad_bottom = c.p.pad_left = c.p.pad_right = 1;
    CHECK(check_conv(cpu(), c, rng));

    // The same in nChw8c, against the reference on strided copies; and that it took this path.
    const auto blocked = [](const Buf& strided) {
      Buf b = make(strided.v.shape, DType::f32, Layout::nchw);
      b.v.layout = MemoryLayout::nChw8c;
      cpu().copy(b.v, strided.v);
      return b;
    };
    const auto strided = [](const Buf& b) {
      Buf s = make(b.v.shape, DType::f32, Layout::nchw);
      cpu().copy(s.v, b.v);
      return s;
    };
    Buf x = random({N, C, H, W}, DType::f32, Layout::nchw, rng);
    Buf w = random({K, C, 3, 3}, DType::f32, Layout::nchw, rng);
    Buf bias = random({K}, DType::f32, Layout::nchw, rng);
    Buf dy = random({N, K, H, W}, DType::f32, Layout::nchw, rng);
    Buf bx = blocked(x), bdy = blocked(dy), by = blocked(dy), bdx = blocked(x);
    Buf dw1 = like(w), dw2 = like(w), db1 = like(bias), db2 = like(bias);
    CHECK(cpu::winograd_f32_forward(by.v, bx.v, w.v, &bias.v, c.p));
    CHECK(cpu::winograd_f32_backward_data(bdx.v, bdy.v, w.v, c.p));
    CHECK(cpu::winograd_f32_backward_weights(dw1.v, &db1.v, bdy.v, bx.v, c.p));
    Buf y2 = like(dy), dx2 = like(x);
    ref().conv2d_forward(y2.v, x.v, w.v, &bias.v, c.p);
    ref().conv2d_backward_data(dx2.v, dy.v, w.v, c.p);
    ref().conv2d_backward_weights(dw2.v, &db2.v, dy.v, x.v, c.p);
    const double f32 = rtol_of(DType::f32);
    CHECK(close(strided(by).v, y2.v, f32, atol_of(DType::f32, C * 9.0), "nChw8c forward"));
    CHECK(close(strided(bdx).v, dx2.v, f32, atol_of(DType::f32, K * 9.0), "nChw8c backward-data"));
    CHECK(close(dw1.v, dw2.v, f32, atol_of(DType::f32, double(N * H * W)), "nChw8c backward-weights"));
    CHECK(close(db1.v, db2.v, f32, atol_of(DType::f32, double(N * H * W)), "nChw8c bias gradient"));
  }
  // Backward-weights' shared chunks with other counts of threads (9x128x128x16x16: three
  // chunks with 3 threads).
  check_with_threads(DType::f32, {{1, {11, 96, 96, 5, 5}}, {3, {9, 128, 128, 16, 16}}}, rng);
  check_strided_weights(DType::f32, cpu::winograd_f32_forward, cpu::winograd_f32_backward_data,
                        cpu::winograd_f32_backward_weights, rng);
  // Not for bf16, other geometries, channel counts off the 8-lane block, or --conv-algo direct.
  Buf x = random({2, 16, 8, 8}, DType::f32, Layout::nhwc, rng);
  Buf w = random({32, 16, 3, 3}, DType::f32, Layout::nchw, rng);
  Buf y = make({2, 32, 8, 8}, DType::f32, Layout::nhwc);
  Conv2dParams padded;
  padded.pad_top = padded.pad_bottom = padded.pad_left = padded.pad_right = 1;
  CHECK(cpu::winograd_f32_forward(y.v, x.v, w.v, nullptr, padded));
  CHECK_FALSE(cpu::winograd_f32_forward(y.v, x.v, w.v, nullptr, Conv2dParams{}));
  Buf x12 = random({2, 12, 8, 8}, DType::f32, Layout::nhwc, rng);
  Buf w12 = random({32, 12, 3, 3}, DType::f32, Layout::nchw, rng);
  CHECK_FALSE(cpu::winograd_f32_forward(y.v, x12.v, w12.v, nullptr, padded));
  Buf xb = random({2, 16, 8, 8}, DType::bf16, Layout::nhwc, rng);
  Buf wb = random({32, 16, 3, 3}, DType::bf16, Layout::nchw, rng);
  Buf yb = make({2, 32, 8, 8}, DType::bf16, Layout::nhwc);
  CHECK_FALSE(cpu::winograd_f32_forward(yb.v, xb.v, wb.v, nullptr, padded));
  set_conv_algorithm(ConvAlgorithm::direct);
  CHECK_FALSE(cpu::winograd_f32_forward(y.v, x.v, w.v, nullptr, padded));
}

// Their rounding against the f64 truth, beside oneDNN's direct kernels' on the same ISA:
// ResNet-18's layers at the model-parity batch (2) and at 64, He-uniform weights.
TEST_CASE("f32 Winograd rounds about as much as the direct convolution") {
  if (!cpu::winograd_f32_runs_here()) {
    MESSAGE("not checked: f32 Winograd runs where the CPU has AVX2 and oneDNN no AVX-512");
    return;
  }
  const ConvAlgorithmGuard guard(conv_algorithm());
  std::mt19937 rng(5);
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  // rms(got - truth) / rms(truth).
  const auto rms_error = [](const Buf& got, const Buf& truth) {
    double err = 0, norm = 0;
    for (int64_t i = 0; i < got.v.numel(); ++i) {
      const double t = truth.v.ptr<double>()[i], d = got.v.ptr<float>()[i] - t;
      err += d * d;
      norm += t * t;
    }
    return std::sqrt(err / norm);
  };
  const int64_t shapes[][4] = {{2, 64, 32, 32}, {2, 256, 8, 8}, {64, 256, 8, 8}};
  for (const auto& [N, C, H, W] : shapes) {
    CAPTURE(N);
    CAPTURE(C);
    const double bound = std::sqrt(6.0 / double(C * 9));
    Buf x = random({N, C, H, W}, DType::f32, Layout::nchw, rng);
    Buf w = random({C, C, 3, 3}, DType::f32, Layout::nchw, rng, -bound, bound);
    Buf dy = random({N, C, H, W}, DType::f32, Layout::nchw, rng);
    Buf x64 = make({N, C, H, W}, DType::f64), w64 = make({C, C, 3, 3}, DType::f64);
    Buf dy64 = like(x64), y_true = like(x64), dx_true = like(x64), dw_true = like(w64);
    ref().copy(x64.v, x.v);
    ref().copy(w64.v, w.v);
    ref().copy(dy64.v, dy.v);
    ref().conv2d_forward(y_true.v, x64.v, w64.v, nullptr, p);
    ref().conv2d_backward_data(dx_true.v, dy64.v, w64.v, p);
    ref().conv2d_backward_weights(dw_true.v, nullptr, dy64.v, x64.v, p);
    // Forward, backward-data and backward-weights with the algorithm asked for.
    const auto errors = [&](ConvAlgorithm algorithm) {
      set_conv_algorithm(algorithm);
      Buf y = like(x), dx = like(x), dw = like(w);
      cpu().conv2d_forward(y.v, x.v, w.v, nullptr, p);
      cpu().conv2d_backward_data(dx.v, dy.v, w.v, p);
      cpu().conv2d_backward_weights(dw.v, nullptr, dy.v, x.v, p);
      return std::array<double, 3>{rms_error(y, y_true), rms_error(dx, dx_true), rms_error(dw, dw_true)};
    };
    const std::array<double, 3> winograd = errors(ConvAlgorithm::automatic);
    const std::array<double, 3> direct = errors(ConvAlgorithm::direct);
    const std::string names[] = {"forward", "backward-data", "backward-weights"};
    for (int i = 0; i < 3; ++i) {
      CAPTURE(names[i]);
      MESSAGE("N" << N << " C" << C << " " << H << "x" << W << " " << names[i]
                  << ": rms error / rms, Winograd " << winograd[i] << ", direct " << direct[i]);
      // Measured: 0.6-1.7x direct's on these shapes, oneDNN 2.6 held to AVX2.
      CHECK(winograd[i] <= 2.5 * direct[i]);
      CHECK(winograd[i] < 2e-6);
    }
  }
}

// ---------------------------------------------------------------- matmul
void check_matmul(int64_t B, int64_t M, int64_t K, int64_t N, bool ta, bool tb, bool bcast_a,
                  bool bcast_b, DType dt, std::mt19937& rng, int& failed) {
  // a (B, M, K): transposed means stored as (B, K, M); broadcast means batch stride 0.
  Buf a = make_strided({B, M, K}, ta ? Shape{M * K, 1, M} : Shape{M * K, K, 1}, dt);
  Buf b = make_strided({B, K, N}, tb ? Shape{K * N, 1, K} : Shape{K * N, N, 1}, dt);
  if (bcast_a) a = make_strided({B, M, K}, {0, ta ? 1 : K, ta ? M : 1}, dt);
  if (bcast_b) b = make_strided({B, K, N}, {0, tb ? 1 : N, tb ? K : 1}, dt);
  randomize(a.v, rng);
  randomize(b.v, rng);
  Buf o1 = make({B, M, N}, dt), o2 = make({B, M, N}, dt);
  cpu().matmul(o1.v, a.v, b.v);
  ref().matmul(o2.v, a.v, b.v);
  char name[160];
  std::snprintf(name, sizeof name, "matmul B%lld M%lld K%lld N%lld ta%d tb%d bca%d bcb%d %s",
                (long long)B, (long long)M, (long long)K, (long long)N, ta, tb, bcast_a, bcast_b,
                dtype_name(dt));
  if (!close(o1.v, o2.v, rtol_of(dt), atol_of(dt, double(K)), name)) ++failed;
}

TEST_CASE("matmul: batched, transposed strides, batch broadcast, bf16, f16") {
  std::mt19937 rng(2);
  int failed = 0, cases = 0;
  const int64_t sizes[][4] = {{1, 1, 1, 1}, {1, 5, 7, 3}, {3, 13, 17, 1}, {2, 1, 64, 31}, {4, 33, 65, 17}, {1, 128, 96, 80}};
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (auto& s : sizes) {
      for (int mode = 0; mode < 16; ++mode) {
        check_matmul(s[0], s[1], s[2], s[3], mode & 1, mode & 2, mode & 4, mode & 8, dt, rng, failed);
        ++cases;
      }
    }
  }
  MESSAGE(cases << " matmul cases");
  CHECK(failed == 0);
}

// ---------------------------------------------------------------- the shared sweeps
TEST_CASE("max / avg / adaptive pooling with ceil_mode and count_include_pad match the reference") {
  CHECK(sweep_pooling(cpu(), {DType::f32, DType::bf16, DType::f16}));
}
TEST_CASE("batch norm train / eval / backward match the reference") {
  CHECK(sweep_batch_norm(cpu(), {DType::f32, DType::bf16, DType::f16}));
}
TEST_CASE("batch norm fused with relu(y + residual), forward and backward, match the reference") {
  // 16-bit channels-last and (N, C) take the own two-pass loops; f32, NCHW and a residual in
  // another layout compose the separate kernels.
  CHECK(sweep_batch_norm_relu(cpu(), {DType::f32, DType::bf16, DType::f16}));
}

// The own loops' statistics merge blocks of 256 rows and the threads' partial sums: sizes
// that take many blocks and both threads, a mean far from 0, and no affine parameters.
TEST_CASE("fused batch norm + relu over many blocks and threads, with a large mean and without gamma/beta") {
  struct Case {
    Shape shape;
    DType dt;
    double offset;
    bool affine, residual;
  };
  const Case cases[] = {{{64, 64, 16, 16}, DType::bf16, 100.0, true, true},
                        {{600, 40}, DType::f16, -30.0, true, false},
                        {{8, 33, 9, 11}, DType::bf16, 0.0, false, true}};
  std::mt19937 rng(5);
  const double eps = 1e-5;
  for (const Case& c : cases) {
    const int64_t C = c.shape[1];
    const Layout lay = c.shape.size() == 4 ? Layout::nhwc : Layout::nchw;  // rows of C channels
    const std::string name = shape_str(c.shape) + " " + dtype_name(c.dt);
    CAPTURE(name);
    Buf x = random(c.shape, c.dt, lay, rng, c.offset - 1, c.offset + 1);
    Buf r = random(c.shape, c.dt, lay, rng), dy = random(c.shape, c.dt, lay, rng);
    Buf g = random({C}, DType::f32, Layout::nchw, rng, 0.5, 1.5), b = random({C}, DType::f32, Layout::nchw, rng);
    const View* gp = c.affine ? &g.v : nullptr;
    const View* bp = c.affine ? &b.v : nullptr;
    const View* rp = c.residual ? &r.v : nullptr;
    Buf y1 = like(x), y2 = like(x), m1 = make({C}, DType::f32), m2 = like(m1), v1 = like(m1), v2 = like(m1);
    cpu().batch_norm_relu_forward_train(y1.v, m1.v, v1.v, x.v, gp, bp, rp, eps);
    ref().batch_norm_relu_forward_train(y2.v, m2.v, v2.v, x.v, gp, bp, rp, eps);
    const double terms = double(x.v.numel() / C);
    CHECK(close(m1.v, m2.v, 1e-6, 1e-6, "mean " + name));
    CHECK(close(v1.v, v2.v, 1e-4, 1e-6, "var " + name));
    CHECK(close(y1.v, y2.v, rtol_of(c.dt), atol_of(c.dt, 1), "y " + name));
    Buf dx1 = like(x), dx2 = like(x), dr1 = like(x), dr2 = like(x);
    Buf dg1 = like(m1), dg2 = like(m1), db1 = like(m1), db2 = like(m1);
    View *dg1p = c.affine ? &dg1.v : nullptr, *dg2p = c.affine ? &dg2.v : nullptr;
    View *db1p = c.affine ? &db1.v : nullptr, *db2p = c.affine ? &db2.v : nullptr;
    cpu().batch_norm_relu_backward(dx1.v, c.residual ? &dr1.v : nullptr, dg1p, db1p, dy.v, y2.v, x.v, m2.v,
                                   v2.v, gp, eps);
    ref().batch_norm_relu_backward(dx2.v, c.residual ? &dr2.v : nullptr, dg2p, db2p, dy.v, y2.v, x.v, m2.v,
                                   v2.v, gp, eps);
    CHECK(close(dx1.v, dx2.v, rtol_of(c.dt) * 10, atol_of(c.dt, 1) * 10, "dx " + name));
    if (c.residual) CHECK(close(dr1.v, dr2.v, 0, 0, "dresidual " + name));
    if (c.affine) {
      // f32 sums of many 16-bit terms: against the sums' scale (the terms), not their values.
      CHECK(close(dg1.v, dg2.v, 1e-4, 1e-5 * terms, "dgamma " + name));
      CHECK(close(db1.v, db2.v, 1e-4, 1e-5 * terms, "dbeta " + name));
    }
  }
}

TEST_CASE("softmax / log-softmax forward and backward match the reference") {
  CHECK(sweep_softmax(cpu(), {DType::f32, DType::bf16}));
}
TEST_CASE("unary / binary / where over same-layout, per-channel and scalar operands") {
  CHECK(sweep_elementwise(cpu(), {DType::f32, DType::bf16, DType::f16}));
}
TEST_CASE("copy (relayout, dtype conversion) and fill") {
  CHECK(sweep_copy(cpu(), {DType::f32, DType::bf16, DType::f16, DType::i64}));
}
TEST_CASE("fused SGD, Adam and AdamW steps match the reference") {
  CHECK(sweep_optimizers(cpu(), {DType::f32, DType::f64, DType::bf16}));
}
TEST_CASE("reduce sum / mean (and fallbacks) over dims of NCHW and NHWC tensors") {
  CHECK(sweep_reduce(cpu(), {DType::f32}));
}

// ---------------------------------------------------------------- caches
TEST_CASE("conv primitives are cached and weights re-reordered only on a new version") {
  const size_t entries_before = cpu::dnnl_cache_stats().weight_entries;
  std::mt19937 rng(9);
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  const int64_t N = 2, C = 32, K = 32, H = 8, W = 8;
  Buf x = random({N, C, H, W}, DType::f32, Layout::nhwc, rng);
  Buf w = random({K, C, 3, 3}, DType::f32, Layout::nchw, rng);
  auto derived = std::make_unique<DerivedCache>();  // what a Storage holds
  w.v.derived = derived.get();
  w.v.version = 1;
  Buf y1 = make({N, K, H, W}, DType::f32, Layout::nhwc), y2 = like(y1);

  cpu().conv2d_forward(y1.v, x.v, w.v, nullptr, p);
  const cpu::DnnlCacheStats s1 = cpu::dnnl_cache_stats();
  cpu().conv2d_forward(y1.v, x.v, w.v, nullptr, p);
  const cpu::DnnlCacheStats s2 = cpu::dnnl_cache_stats();
  CHECK(s2.primitive_misses == s1.primitive_misses);
  CHECK(s2.primitives == s1.primitives);
  CHECK(s2.weight_reorders == s1.weight_reorders);  // same version: reused

  // New weights in the same storage, version bumped: the result must follow them.
  randomize(w.v, rng);
  w.v.version = 2;
  cpu().conv2d_forward(y1.v, x.v, w.v, nullptr, p);
  ref().conv2d_forward(y2.v, x.v, w.v, nullptr, p);
  CHECK(close(y1.v, y2.v, 1e-4, atol_of(DType::f32, C * 9.0), "conv after version bump"));
  const cpu::DnnlCacheStats s3 = cpu::dnnl_cache_stats();
  CHECK(s3.primitive_misses == s2.primitive_misses);
  CHECK(s3.weight_entries == s2.weight_entries);  // the cached buffer was reused
  CHECK(s3.weight_entries == entries_before + 1);

  // The reordered weights die with their owner (autocast's per-step casts piled up before).
  derived.reset();
  CHECK(cpu::dnnl_cache_stats().weight_entries == entries_before);
}

TEST_CASE("a oneDNN failure becomes a runtime_error naming the op") {
  // Mismatched output shape: oneDNN rejects the descriptor (invalid arguments).
  Buf x = make({1, 3, 5, 5}, DType::f32), w = make({4, 3, 3, 3}, DType::f32);
  Buf y = make({1, 4, 4, 4}, DType::f32);
  Conv2dParams p;
  try {
    cpu().conv2d_forward(y.v, x.v, w.v, nullptr, p);
    FAIL("expected an exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("conv2d_forward") != std::string::npos);
  }
}

TEST_CASE("set_num_threads / num_threads") {
  const int before = num_threads();
  CHECK(before >= 1);
  set_num_threads(1);
  CHECK(num_threads() == 1);
  set_num_threads(before);
  CHECK(num_threads() == before);
  CHECK_THROWS(set_num_threads(0));
}

}  // namespace
}  // namespace ringflow
