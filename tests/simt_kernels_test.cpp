// The CUDA backend's own kernels (kernels/simt/), run on the CPU by HostExec over the launch
// grids the GPU would use, against reference_backend(): the sweeps cpu_kernels_test runs on
// the CPU table (direct convolutions, pooling, batch norm, softmax, elementwise, copy,
// reductions, fused optimizer steps) in f32, f64, f16 and bf16; which views take the column
// sums and batch norm's three launches; the ops only this table has
// (argmax, gather, scatter_add, adaptive pooling, integer ops); grids larger than one launch
// (grid-stride loops); rows longer than a block. And the CUDA table itself: no entry the
// models use is missing. No GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/kernels/simt/batch_norm.h"
#include "ringflow/kernels/simt/conv.h"
#include "ringflow/kernels/simt/fast_div.h"
#include "ringflow/kernels/simt/host_backend.h"
#include "ringflow/kernels/simt/host_exec.h"
#include "ringflow/kernels/simt/indexer.h"
#include "ringflow/kernels/simt/pool.h"
#include "ringflow/kernels/simt/reduce.h"
#include "ringflow/kernels/simt/simt.h"
#include "ringflow/tests/kernel_sweep.h"

namespace ringflow {
namespace {

using namespace sweep;

const Backend& simt() { return simt_host_backend(); }
const Backend& ref() { return reference_backend(); }
const std::vector<DType> kFloats = {DType::f32, DType::f64, DType::f16, DType::bf16};

TEST_CASE("FastDiv: n / d as the CPU's division gives it, at the edges of its range and beyond") {
  constexpr int64_t kTop = (int64_t{1} << 31) - 1;  // the largest n and d of the fast path
  std::vector<int64_t> divisors, numerators;
  for (int64_t d = 1; d <= 300; ++d) divisors.push_back(d);
  for (int64_t k = 9; k <= 31; ++k)
    for (int64_t e : {-1, 0, 1}) divisors.push_back(std::min((int64_t{1} << k) + e, kTop));
  for (int64_t d : {int64_t{3} * 7 * 11 * 13 * 17, int64_t{123456789}, kTop}) divisors.push_back(d);
  uint64_t state = 42;  // splitmix-like: numerators spread over [0, 2^31)
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    numerators.push_back(static_cast<int64_t>(state >> 33));
  }
  int64_t bad = 0;
  for (int64_t d : divisors) {
    const simt::FastDiv fast(d, kTop);
    std::vector<int64_t> ns = numerators;
    // Every multiple of d near the top and the values around it, where rounding would show.
    for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{2}, kTop / d - 1, kTop / d})
      for (int64_t e : {-1, 0, 1}) ns.push_back(std::clamp(m * d + e, int64_t{0}, kTop));
    for (int64_t n : ns) {
      int64_t q, r;
      fast.divmod(n, q, r);
      bad += q != n / d || r != n % d;
    }
  }
  CHECK(bad == 0);
  // Past 2^31 it divides plainly.
  const simt::FastDiv wide(7, int64_t{1} << 40);
  CHECK(wide.div((int64_t{1} << 40) + 5) == ((int64_t{1} << 40) + 5) / 7);
}

// Each operand's offset of a linear index, by plain division over the dims in the indexer's
// order (largest stride of operand 0 first, as make_indexer sorts them; no dims merged).
std::array<int64_t, 2> plain_offsets(const std::array<const View*, 2>& views, int64_t linear) {
  std::vector<int> dims(views[0]->shape.size());
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int>(d);
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int a, int b) { return views[0]->strides[a] > views[0]->strides[b]; });
  std::array<int64_t, 2> off{0, 0};
  for (auto d = dims.rbegin(); d != dims.rend(); ++d) {
    const int64_t size = views[0]->shape[*d], i = linear % size;
    linear /= size;
    for (int k = 0; k < 2; ++k) off[k] += i * views[k]->strides[*d];
  }
  return off;
}

TEST_CASE("the indexer's offsets (FastDiv) are plain division's: a permuting copy, a broadcast, past 2^31") {
  const auto check = [](const View& a, const View& b, std::vector<int64_t> linears) {
    const simt::Indexer<2> ix = simt::make_indexer<2>({&a, &b}, "test");
    CHECK(ix.ndim > 1);  // the divisions ran
    int64_t bad = 0;
    for (int64_t linear : linears) {
      int64_t off[2];
      ix.offsets(linear, off);
      const std::array<int64_t, 2> want = plain_offsets({&a, &b}, linear);
      bad += off[0] != want[0] || off[1] != want[1];
    }
    CHECK(bad == 0);
  };
  const Shape s = {3, 5, 7, 11};
  View nhwc{nullptr, DType::f32, s, channels_last_strides(s)}, nchw{nullptr, DType::f32, s, contiguous_strides(s)};
  View row{nullptr, DType::f32, s, {0, 0, 0, 1}};  // an (11,) row broadcast
  std::vector<int64_t> every(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<int64_t>(i);
  check(nhwc, nchw, every);
  check(nchw, nhwc, every);
  check(nhwc, row, every);
  // 2^32 + elements: the divisions leave the fast path, the offsets stay right.
  const Shape big = {1 << 12, 1 << 11, 3, 257};
  View big_nhwc{nullptr, DType::f32, big, channels_last_strides(big)};
  View big_nchw{nullptr, DType::f32, big, contiguous_strides(big)};
  const int64_t n = shape_numel(big);
  check(big_nhwc, big_nchw, {0, 1, 256, 257, (int64_t{1} << 31) - 1, int64_t{1} << 31, n / 2, n - 2, n - 1});
}

TEST_CASE("direct convolutions (the GPU's without cuDNN): the sweep, every floating dtype") {
  Backend table = simt();
  simt::set_conv_kernels<simt::HostExec>(table);
  CHECK(sweep_conv(table, kFloats, /*large=*/false));
}

TEST_CASE("pooling, batch norm, softmax: the sweeps, every floating dtype") {
  CHECK(sweep_pooling(simt(), kFloats));
  CHECK(sweep_batch_norm(simt(), kFloats));
  CHECK(sweep_softmax(simt(), kFloats));
}

TEST_CASE("batch norm fused with relu(y + residual), forward and backward, and the running statistics") {
  CHECK(sweep_batch_norm_relu(simt(), kFloats));
}

// Channels-last batch norm merges per-chunk moments (Note [Batch norm with channels innermost]):
// values far from zero against their spread, where a plain sum of squares would cancel in
// float (var off by ~20%), still give the reference's statistics and outputs.
TEST_CASE("channels-last batch norm, f32, values offset by 1000 against a spread of 1") {
  std::mt19937 rng(21);
  const Shape shape{4, 8, 9, 7};  // 252 rows of 8 channels: 16 chunks, the last one short
  const double eps = 1e-5;
  Buf x = random(shape, DType::f32, Layout::nhwc, rng, 999, 1001), dy = random(shape, DType::f32, Layout::nhwc, rng);
  Buf g = random({8}, DType::f32, Layout::nchw, rng, 0.5, 1.5), b = random({8}, DType::f32, Layout::nchw, rng);
  Buf y1 = like(x), y2 = like(x), dx1 = like(x), dx2 = like(x);
  Buf m1 = make({8}, DType::f32), m2 = make({8}, DType::f32), v1 = make({8}, DType::f32), v2 = make({8}, DType::f32);
  simt().batch_norm_forward_train(y1.v, m1.v, v1.v, x.v, &g.v, &b.v, eps);
  ref().batch_norm_forward_train(y2.v, m2.v, v2.v, x.v, &g.v, &b.v, eps);
  CHECK(close(m1.v, m2.v, 1e-6, 0, "mean"));
  CHECK(close(v1.v, v2.v, 1e-4, 0, "var"));
  // y is O(1): a float mean of ~1000 is off by up to ~6e-5, 1e-4 of a deviation of ~0.6.
  CHECK(close(y1.v, y2.v, 0, 5e-4, "y"));
  simt().batch_norm_backward(dx1.v, nullptr, nullptr, dy.v, x.v, m2.v, v2.v, &g.v, eps);
  ref().batch_norm_backward(dx2.v, nullptr, nullptr, dy.v, x.v, m2.v, v2.v, &g.v, eps);
  CHECK(close(dx1.v, dx2.v, 0, 5e-4, "dx"));
}

// cuDNN's batch norm saves 1 / sqrt(var + eps) where the table keeps var (cudnn_batch_norm.cpp):
// the own kernel that converts, against the formula in f64, both ways and round trip.
TEST_CASE("batch norm statistics: the biased variance from 1/sqrt(var + eps) and back") {
  const double eps = 1e-5;
  const std::vector<double> var = {0.0, 1e-7, 1e-5, 0.25, 1.0, 3.5, 1e4};
  const int64_t C = static_cast<int64_t>(var.size());
  std::vector<float> v32(var.begin(), var.end()), inv(C), back(C);
  View vv{v32.data(), DType::f32, {C}, {1}}, iv{inv.data(), DType::f32, {C}, {1}},
      bv{back.data(), DType::f32, {C}, {1}};
  simt::batch_norm_convert_stats(simt::HostExec{}, iv, vv, eps, /*to_var=*/false);
  simt::batch_norm_convert_stats(simt::HostExec{}, bv, iv, eps, /*to_var=*/true);
  for (int64_t c = 0; c < C; ++c) {
    const double want = 1 / std::sqrt(static_cast<double>(v32[c]) + eps);
    CHECK(inv[c] == doctest::Approx(want).epsilon(1e-6));
    // var comes back to within f32's rounding of var + eps (the eps is subtracted again).
    CHECK(std::fabs(back[c] - v32[c]) <= 4e-7 * (v32[c] + eps));
  }
  // A strided output and an f64 vector take the same path.
  std::vector<double> inv64(2 * C, -1.0);
  View iv64{inv64.data(), DType::f64, {C}, {2}};
  simt::batch_norm_convert_stats(simt::HostExec{}, iv64, vv, eps, /*to_var=*/false);
  for (int64_t c = 0; c < C; ++c) {
    CHECK(inv64[2 * c] == doctest::Approx(1 / std::sqrt(static_cast<double>(v32[c]) + eps)).epsilon(1e-12));
    CHECK(inv64[2 * c + 1] == -1.0);
  }
}

TEST_CASE("unary, binary, where, copy, fill, reduce: the sweeps, every dtype") {
  CHECK(sweep_elementwise(simt(), kFloats));
  CHECK(sweep_copy(simt(), {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}));
  CHECK(sweep_reduce(simt(), kFloats));
}

TEST_CASE("fused SGD, Adam and AdamW over many parameters: the sweep, every floating dtype") {
  CHECK(sweep_optimizers(simt(), kFloats));
}

// Note [The grad scaler's fused step] (framework/optim/grad_scaler.cpp): the check reading only,
// then the step unscaling as it reads, bit for bit unscale-then-step, here and on the reference.
TEST_CASE("grad scaler fused into SGD, Adam and AdamW: equal to unscale-then-step, every floating dtype") {
  CHECK(sweep_scaled_optimizers(simt(), kFloats));
}

TEST_CASE("integer elementwise ops and reductions are exact") {
  std::mt19937 rng(11);
  for (DType dt : {DType::i32, DType::i64}) {
    Buf a = random({3, 17, 5, 7}, dt, Layout::nchw, rng, -50, 50);
    Buf b = random({3, 17, 5, 7}, dt, Layout::nhwc, rng, 1, 9);
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div,
                        BinaryOp::maximum, BinaryOp::minimum, BinaryOp::lt, BinaryOp::eq}) {
      Buf o1 = make({3, 17, 5, 7}, dt), o2 = like(o1);
      simt().binary(op, o1.v, a.v, b.v);
      ref().binary(op, o2.v, a.v, b.v);
      CHECK(close(o1.v, o2.v, 0, 0, std::string("int binary ") + binary_op_name(op)));
    }
    for (UnaryOp op : {UnaryOp::neg, UnaryOp::abs, UnaryOp::relu}) {
      Buf o1 = make({3, 17, 5, 7}, dt), o2 = like(o1);
      simt().unary(op, o1.v, a.v);
      ref().unary(op, o2.v, a.v);
      CHECK(close(o1.v, o2.v, 0, 0, std::string("int unary ") + unary_op_name(op)));
    }
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      Buf o1 = make({1, 17, 1, 1}, dt), o2 = like(o1);
      simt().reduce(op, o1.v, a.v);
      ref().reduce(op, o2.v, a.v);
      CHECK(close(o1.v, o2.v, 0, 0, std::string("int reduce ") + reduce_op_name(op)));
    }
    Buf o = make({3, 17, 5, 7}, DType::f32);
    CHECK_THROWS_WITH(simt().unary(UnaryOp::exp, o.v, a.v), doctest::Contains("dtype mismatch"));
  }
}

// Note [Column sums] in kernels/simt/reduce.h: which views take the two launches, and their
// results on views the sweep does not make (permuted, expanded, overlapping, integer, a
// strided out, an empty reduced dim, many chunks).
TEST_CASE("column sums: the views that read along the rows, and their results") {
  const auto shape_of = [](const Shape& shape, const Shape& strides, const Shape& out_shape) {
    Buf in = make_strided(shape, strides, DType::f32), out = make(out_shape, DType::f32);
    return simt::column_shape(out.v, in.v);
  };
  const auto nhwc = shape_of({8, 16, 5, 3}, layout_strides({8, 16, 5, 3}, Layout::nhwc), {1, 16, 1, 1});
  REQUIRE(nhwc);  // a channels-last bias gradient
  CHECK(nhwc->M == 8 * 5 * 3);
  CHECK(nhwc->C == 16);
  CHECK(nhwc->kept == 1);
  CHECK(shape_of({37, 9}, {9, 1}, {1, 9}));                       // a linear layer's bias gradient
  CHECK(shape_of({4, 5, 6}, {6, 24, 1}, {1, 1, 6}));               // permuted, dense
  CHECK_FALSE(shape_of({8, 16, 5, 3}, contiguous_strides({8, 16, 5, 3}), {1, 16, 1, 1}));  // NCHW
  CHECK_FALSE(shape_of({5, 4}, {0, 1}, {1, 4}));                  // expanded
  CHECK_FALSE(shape_of({4, 4}, {1, 1}, {1, 4}));                  // overlapping
  CHECK_FALSE(shape_of({4, 5, 6}, {30, 6, 1}, {1, 5, 6}));        // two kept dims

  std::mt19937 rng(77);
  const auto both = [&](ReduceOp op, const Buf& in, const Buf& out, const std::string& name) {
    Buf want = make(out.v.shape, out.v.dtype);
    simt().reduce(op, out.v, in.v);
    ref().reduce(op, want.v, in.v);
    const bool exact = !is_floating(in.v.dtype);
    return close(out.v, want.v, exact ? 0 : 1e-5, exact ? 0 : 1e-4, name);
  };
  for (const auto& [shape, strides] : std::vector<std::pair<Shape, Shape>>{
           {{4, 5, 6}, {6, 24, 1}}, {{5, 4}, {0, 1}}, {{4, 4}, {1, 1}}, {{300000, 16}, {16, 1}}}) {
    Buf in = make_strided(shape, strides, DType::f32);
    randomize(in.v, rng);
    Shape os(shape.size(), 1);
    os.back() = shape.back();
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean})
      CHECK(both(op, in, make(os, DType::f32), std::string(reduce_op_name(op)) + " " + shape_str(shape)));
  }
  for (DType dt : {DType::i32, DType::i64})
    CHECK(both(ReduceOp::sum, random({37, 9}, dt, Layout::nchw, rng, -100, 100), make({1, 9}, dt),
               std::string("sum ") + dtype_name(dt)));
  CHECK(both(ReduceOp::sum, random({3, 6}, DType::f32, Layout::nchw, rng), make_strided({1, 6}, {100, 3}, DType::f32),
             "a strided out"));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean})
    CHECK(both(op, make({0, 4}, DType::f32), make({1, 4}, DType::f32), "an empty reduced dim"));
}

// Note [Batch norm with channels innermost]: which operands take the three launches, and the
// planes path past one grid of rows (N * C > 65535) and at a pointer off the packs' alignment.
TEST_CASE("batch norm: rows, planes, and planes past one grid and off alignment") {
  const Buf nchw = make({2, 3, 4, 8}, DType::f32), nhwc = make({2, 3, 4, 8}, DType::f32, Layout::nhwc);
  const Buf one_pixel = make({2, 3, 1, 1}, DType::f32);
  CHECK(simt::dense_layout({&nchw.v, &nchw.v}) == simt::Dense::planes);
  CHECK(simt::dense_layout({&nhwc.v, nullptr}) == simt::Dense::rows);
  CHECK(simt::dense_layout({&one_pixel.v}) == simt::Dense::rows);
  CHECK(simt::dense_layout({&nchw.v, &nhwc.v}) == simt::Dense::none);

  std::mt19937 rng(5);
  const double eps = 1e-5;
  const auto check_bn = [&](const Shape& shape, DType dt, int misalign) {
    const int64_t C = shape[1];
    const auto operand = [&] {
      Buf b = make(shape, dt);
      b.v.data = static_cast<unsigned char*>(b.v.data) + misalign * dtype_size(dt);
      randomize(b.v, rng);
      return b;
    };
    Buf x = operand(), dy = operand(), r = operand(), y1 = operand(), y2 = operand(), dx1 = operand(),
        dx2 = operand(), dr1 = operand(), dr2 = operand();
    Buf g = random({C}, DType::f32, Layout::nchw, rng, 0.5, 1.5), b = random({C}, DType::f32, Layout::nchw, rng);
    Buf m1 = make({C}, DType::f32), m2 = like(m1), v1 = like(m1), v2 = like(m1);
    Buf dg1 = make({C}, DType::f32), dg2 = like(dg1), db1 = like(dg1), db2 = like(dg1);
    const double terms = double(x.v.numel() / C);
    const std::string name = shape_str(shape) + " " + dtype_name(dt) + " off by " + std::to_string(misalign);
    simt().batch_norm_relu_forward_train(y1.v, m1.v, v1.v, x.v, &g.v, &b.v, &r.v, eps);
    ref().batch_norm_relu_forward_train(y2.v, m2.v, v2.v, x.v, &g.v, &b.v, &r.v, eps);
    bool ok = close(y1.v, y2.v, rtol_of(dt), atol_of(dt, terms) * 10, "y " + name);
    ok &= close(m1.v, m2.v, 1e-4, 1e-5, "mean " + name) && close(v1.v, v2.v, 1e-4, 1e-5, "var " + name);
    simt().batch_norm_relu_backward(dx1.v, &dr1.v, &dg1.v, &db1.v, dy.v, y2.v, x.v, m2.v, v2.v, &g.v, eps);
    ref().batch_norm_relu_backward(dx2.v, &dr2.v, &dg2.v, &db2.v, dy.v, y2.v, x.v, m2.v, v2.v, &g.v, eps);
    ok &= close(dx1.v, dx2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 100, "dx " + name);
    ok &= close(dr1.v, dr2.v, 0, 0, "dresidual " + name);
    ok &= close(dg1.v, dg2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 10, "dgamma " + name);
    return ok && close(db1.v, db2.v, rtol_of(dt) * 10, atol_of(dt, terms) * 10, "dbeta " + name);
  };
  CHECK(check_bn({1, 65600, 1, 2}, DType::f32, 0));  // phase 1 past one grid: 65600 chunks of one plane
  for (DType dt : {DType::f32, DType::bf16}) CHECK(check_bn({2, 3, 4, 8}, dt, 1));
  // Several planes to a phase-1 block (simt::kPlaneChunk), the last chunk short of them: 7x7
  // (42 planes a chunk, 100 = 42 + 42 + 16; no packs) and 14x14 (11 a chunk, packs in f32).
  for (DType dt : {DType::f32, DType::f16}) {
    CHECK(check_bn({100, 5, 7, 7}, dt, 0));
    CHECK(check_bn({25, 6, 14, 14}, dt, 0));
  }
  const Buf planes_7x7 = make({100, 5, 7, 7}, DType::f32);
  const simt::DenseWalk walk = simt::dense_walk(planes_7x7.v, simt::Dense::planes);
  CHECK(walk.planes_per_chunk == 42);
  CHECK(walk.chunks.chunks == 3);
  CHECK(walk.planes(1).planes_in(2) == 16);
}

TEST_CASE("argmax, max and min along each dim, with ties, -inf and NaN") {
  std::mt19937 rng(12);
  for (DType dt : kFloats) {
    const Shape s{4, 9, 3, 5};
    for (Layout lay : {Layout::nchw, Layout::nhwc}) {
      Buf x = random(s, dt, lay, rng, -3, 3);
      // Ties (a repeated maximum), a row of -inf and a NaN in some lines.
      for_each(x.v, [&](const Shape& i, int64_t off) {
        if (i[1] == 2 || i[1] == 6) set(x.v, off, 5.0);
        if (i[0] == 1) set(x.v, off, -std::numeric_limits<double>::infinity());
        if (i[0] == 2 && i[1] == 4 && i[3] == 1) set(x.v, off, std::nan(""));
      });
      for (int dim = 0; dim < 4; ++dim) {
        Shape os = s;
        os[dim] = 1;
        Buf a1 = make(os, DType::i64), a2 = like(a1);
        simt().reduce(ReduceOp::argmax, a1.v, x.v);
        ref().reduce(ReduceOp::argmax, a2.v, x.v);
        CHECK(close(a1.v, a2.v, 0, 0, "argmax dim " + std::to_string(dim) + " " + dtype_name(dt)));
        for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
          Buf m1 = make(os, dt), m2 = like(m1);
          simt().reduce(op, m1.v, x.v);
          ref().reduce(op, m2.v, x.v);
          CHECK(close(m1.v, m2.v, 0, 0, std::string(reduce_op_name(op)) + " dim " + std::to_string(dim)));
        }
      }
    }
  }
}

TEST_CASE("gather and scatter_add along each dim, duplicates in the index") {
  std::mt19937 rng(13);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64}) {
    const Shape s{5, 7, 3};
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape is = {4, 6, 3};
      is[dim] = 9;  // longer than the dim: indices repeat
      Buf in = random(s, dt, Layout::nchw, rng, -10, 10);
      Buf index = make(is, DType::i64);
      std::uniform_int_distribution<int64_t> pick(0, s[dim] - 1);
      for_each(index.v, [&](const Shape&, int64_t off) { set(index.v, off, double(pick(rng))); });
      Buf g1 = make(is, dt), g2 = like(g1);
      simt().gather(g1.v, in.v, dim, index.v);
      ref().gather(g2.v, in.v, dim, index.v);
      CHECK(close(g1.v, g2.v, 0, 0, "gather dim " + std::to_string(dim) + " " + dtype_name(dt)));

      Buf src = random(is, dt, Layout::nchw, rng, -10, 10);
      Buf o1 = random(s, dt, Layout::nchw, rng, -10, 10), o2 = make(s, dt);
      std::memcpy(o2.mem.data(), o1.mem.data(), o1.mem.size());
      simt().scatter_add(o1.v, dim, index.v, src.v);
      ref().scatter_add(o2.v, dim, index.v, src.v);
      // The device adds in the output's dtype, one contribution at a time.
      CHECK(close(o1.v, o2.v, rtol_of(dt), atol_of(dt, 9), "scatter_add dim " + std::to_string(dim) + " " + dtype_name(dt)));
    }
  }
}

TEST_CASE("max pooling with 64-bit offsets inside a plane (planes past int32's range) gives the 32-bit offsets' results") {
  // The table picks int32_t offsets for every plane small enough; run the same bodies with
  // int64_t here, on planes that any test can hold, as a larger plane would.
  std::mt19937 rng(15);
  Pool2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  for (DType dt : kFloats) {
    for (Layout lay : {Layout::nchw, Layout::nhwc}) {
      const std::string name = std::string(dtype_name(dt)) + " " + layout_name(lay);
      Buf x = random({2, 3, 9, 11}, dt, lay, rng), dy = random({2, 3, 5, 6}, dt, lay, rng);
      Buf y32 = make({2, 3, 5, 6}, dt, lay), y64 = like(y32), dx32 = like(x), dx64 = like(x);
      const Workspace ws = simt().max_pool2d_forward(y32.v, x.v, p);
      simt().max_pool2d_backward(dx32.v, dy.v, x.v, ws, p);
      const simt::PoolGeometry g = simt::pool_geometry(x.v, y64.v, p, "test");
      std::vector<int32_t> argmax(static_cast<size_t>(y64.v.numel()));
      simt::visit_floating(dt, "test", [&](auto tag) {
        using T = decltype(tag);
        simt::HostExec{}.elementwise(y64.v.numel(), simt::MaxPoolForwardBody<T, int64_t>{
                                                        simt::nchw<T>(y64.v), simt::nchw<const T>(x.v), argmax.data(), g});
        simt::HostExec{}.elementwise(x.v.numel(), simt::MaxPoolBackwardBody<T, int64_t>{
                                                      simt::nchw<T>(dx64.v), simt::nchw<const T>(dy.v), argmax.data(), g});
      });
      CHECK(std::equal(argmax.begin(), argmax.end(), static_cast<const int32_t*>(ws.get())));
      CHECK(close(y64.v, y32.v, 0, 0, "max fwd " + name));
      CHECK(close(dx64.v, dx32.v, 0, 0, "max bwd " + name));
    }
  }
}

TEST_CASE("adaptive average pooling forward and backward, bins that overlap and do not") {
  std::mt19937 rng(14);
  for (DType dt : kFloats) {
    for (auto [H, W, P, Q] : std::vector<std::array<int64_t, 4>>{
             {7, 7, 1, 1}, {13, 11, 7, 7}, {5, 5, 7, 7}, {8, 6, 3, 4}, {1, 1, 1, 1}}) {
      for (Layout lay : {Layout::nchw, Layout::nhwc}) {
        Buf x = random({2, 3, H, W}, dt, lay, rng), dy = random({2, 3, P, Q}, dt, lay, rng);
        Buf y1 = make({2, 3, P, Q}, dt, lay), y2 = like(y1), dx1 = like(x), dx2 = like(x);
        const std::string name = shape_str({H, W, P, Q}) + " " + dtype_name(dt);
        simt().adaptive_avg_pool2d_forward(y1.v, x.v);
        ref().adaptive_avg_pool2d_forward(y2.v, x.v);
        CHECK(close(y1.v, y2.v, rtol_of(dt), atol_of(dt, double(H * W)), "adaptive fwd " + name));
        simt().adaptive_avg_pool2d_backward(dx1.v, dy.v);
        ref().adaptive_avg_pool2d_backward(dx2.v, dy.v);
        CHECK(close(dx1.v, dx2.v, rtol_of(dt), atol_of(dt, double(P * Q)), "adaptive bwd " + name));
      }
    }
  }
}

TEST_CASE("launch grids: more elements than one grid holds, rows longer than a block") {
  std::mt19937 rng(15);
  // blocks_for caps the grid at kMaxBlocks blocks of kBlock threads; past that each thread
  // loops. 2^24 + 3 elements need more than one pass of the grid.
  const int64_t n = int64_t{1} << 24 | 3;
  REQUIRE(n > simt::kMaxBlocks * simt::kBlock);
  Buf x = make({n}, DType::f32);
  simt().fill(x.v, 1.5);
  Buf total = make({1}, DType::f32), total_ref = like(total);
  simt().reduce(ReduceOp::sum, total.v, x.v);  // one row of 2^24 elements over 256 threads
  ref().reduce(ReduceOp::sum, total_ref.v, x.v);
  CHECK(close(total.v, total_ref.v, 1e-6, 0, "sum of 2^24 + 3 ones and a half"));
  // More rows than blocks: every row reached once.
  const int64_t rows = simt::kMaxBlocks + 7;
  Buf r = random({rows, 3}, DType::f32, Layout::nchw, rng), o1 = make({rows, 1}, DType::f32), o2 = like(o1);
  simt().reduce(ReduceOp::sum, o1.v, r.v);
  ref().reduce(ReduceOp::sum, o2.v, r.v);
  CHECK(close(o1.v, o2.v, 1e-6, 1e-6, "row sums past the grid"));
  CHECK(simt::blocks_for(0) == 1);
  CHECK(simt::blocks_for(simt::kBlock + 1) == 2);
  CHECK(simt::blocks_for(int64_t{1} << 40) == simt::kMaxBlocks);
}

TEST_CASE("f16 and bf16 round to nearest even on store, as the reference") {
  // Values halfway between two f16 / bf16 neighbours, and past the largest f16 (inf).
  const float f16_tie = 1.0f + 1.0f / 2048;  // between 1 and 1 + 2^-10: even is 1
  const float bf16_tie = 1.0f + 1.0f / 256;  // between 1 and 1 + 2^-7
  CHECK(simt::store<Half>(f16_tie).bits == Half(f16_tie).bits);
  CHECK(simt::store<BFloat16>(bf16_tie).bits == BFloat16(bf16_tie).bits);
  CHECK(simt::load(simt::store<Half>(70000.0f)) == std::numeric_limits<float>::infinity());
  CHECK(simt::load(simt::store<Half>(-2.5)) == -2.5f);
}

// Every entry of the kernel table that the models use in forward, backward and the
// optimizers (all of them today) must be set on cuda: a null one would throw "not
// implemented on cuda" in the middle of a training run.
TEST_CASE("the CUDA kernel table has every entry the models need") {
  const Backend* cuda = cuda_backend();
  if (!cuda) {
    std::string why;
    cuda_device_count(&why);
    MESSAGE("SKIP (no CUDA table): " << why);
    return;
  }
  std::vector<std::string> missing;
  const auto need = [&](bool set, const char* name) {
    if (!set) missing.push_back(name);
  };
#define RF_NEED(entry) need(cuda->entry != nullptr, #entry)
  RF_NEED(allocate); RF_NEED(deallocate); RF_NEED(copy); RF_NEED(fill); RF_NEED(unary);
  RF_NEED(binary); RF_NEED(where); RF_NEED(reduce); RF_NEED(matmul); RF_NEED(gather);
  RF_NEED(scatter_add); RF_NEED(conv2d_forward); RF_NEED(conv2d_backward_data);
  RF_NEED(conv2d_backward_weights); RF_NEED(max_pool2d_forward); RF_NEED(max_pool2d_backward);
  RF_NEED(avg_pool2d_forward); RF_NEED(avg_pool2d_backward); RF_NEED(adaptive_avg_pool2d_forward);
  RF_NEED(adaptive_avg_pool2d_backward); RF_NEED(batch_norm_forward_train);
  RF_NEED(batch_norm_forward_eval); RF_NEED(batch_norm_backward); RF_NEED(softmax_forward);
  RF_NEED(softmax_backward); RF_NEED(sgd_step); RF_NEED(adam_step); RF_NEED(check_scaled_grads);
#undef RF_NEED
  std::string list;
  for (const std::string& m : missing) list += " " + m;
  CHECK_MESSAGE(missing.empty(), "missing on cuda:" << list);
}

}  // namespace
}  // namespace ringflow
