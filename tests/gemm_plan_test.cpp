// The mapping of a strided batched matmul onto one column-major GEMM (kernels/cuda/gemm_plan.h,
// what the cuBLAS matmul runs), checked on the host: a naive column-major strided-batched
// GEMM that reads its arguments as cuBLAS does executes each plan, and the result must match
// the reference backend over layouts (row-major, transposed, padded, broadcast batch, size-1
// dims); so must 1x1 convolutions as GEMMs (kernels/cuda/conv1x1_gemm.h) against the
// reference convolution. Needs no GPU, and no CUDA in the build.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda/conv1x1_gemm.h"
#include "ringflow/kernels/cuda/gemm_plan.h"

using namespace ringflow;
using ringflow::cuda::GemmOperand;
using ringflow::cuda::GemmPlan;

namespace {

// op(X)[i][j] of a column-major operand, as cuBLAS reads it.
double element(const double* x, const GemmOperand& op, int64_t batch, int64_t i, int64_t j) {
  const double* base = x + batch * op.batch_stride;
  return op.transpose ? base[j + i * op.ld] : base[i + j * op.ld];
}

// C = op(A) @ op(B) per batch entry, as cublasDgemmStridedBatched with alpha 1, beta 0.
void host_gemm(const GemmPlan& p, const double* A, const double* B, double* C) {
  for (int64_t t = 0; t < p.batch; ++t)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < p.k; ++l) acc += element(A, p.a, t, i, l) * element(B, p.b, t, l, j);
        C[t * p.c.batch_stride + i + j * p.c.ld] = acc;
      }
}

int64_t span(const Shape& shape, const Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return last + 1;
}

// A (B, R, C) operand with the given strides over its own buffer of distinct values.
struct Operand {
  std::vector<double> mem;
  View view;
  Operand(const Shape& shape, const Shape& strides, double seed) {
    mem.resize(span(shape, strides));
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = seed + 0.25 * double(i % 17) - double(i % 5);
    view.data = mem.data();
    view.dtype = DType::f64;
    view.shape = shape;
    view.strides = strides;
  }
};

Shape row_major(int64_t R, int64_t C) { return {R * C, C, 1}; }
Shape col_major(int64_t R, int64_t C) { return {R * C, 1, R}; }

}  // namespace

TEST_CASE("gemm_operand reads row-major and column-major matrices and refuses the rest") {
  Operand x({2, 3, 4}, row_major(3, 4), 0);
  CHECK(*cuda::gemm_operand(x.view) == GemmOperand{false, 4, 12});
  x.view.strides = col_major(3, 4);
  CHECK(*cuda::gemm_operand(x.view) == GemmOperand{true, 3, 12});
  x.view.strides = {12, 5, 1};  // padded rows: ld 5
  CHECK(*cuda::gemm_operand(x.view) == GemmOperand{false, 5, 12});
  x.view.strides = {0, 4, 1};  // one matrix broadcast over the batch
  CHECK(*cuda::gemm_operand(x.view) == GemmOperand{false, 4, 0});
  x.view.strides = {24, 8, 2};  // every other element: no GEMM layout
  CHECK_FALSE(cuda::gemm_operand(x.view).has_value());
  x.view.strides = {12, 0, 1};  // a row broadcast down the matrix
  CHECK_FALSE(cuda::gemm_operand(x.view).has_value());
  x.view.strides = {12, 3, 1};  // rows overlap
  CHECK_FALSE(cuda::gemm_operand(x.view).has_value());
  // Size-1 dims: their strides say nothing.
  Operand row({1, 1, 4}, {99, 77, 1}, 0);
  CHECK(*cuda::gemm_operand(row.view) == GemmOperand{false, 4, 0});
  Operand column({1, 4, 1}, {99, 1, 0}, 0);
  CHECK(cuda::gemm_operand(column.view).has_value());
}

TEST_CASE("each plan, run as cuBLAS would, matches the reference matmul") {
  struct Layout {
    const char* name;
    Shape (*strides)(int64_t, int64_t);
  };
  const Layout layouts[] = {{"row-major", row_major}, {"column-major", col_major}};
  const int64_t dims[][4] = {{1, 1, 1, 1}, {2, 3, 4, 5}, {3, 7, 1, 2}, {1, 1, 9, 4},
                             {2, 5, 3, 1}, {4, 2, 13, 11}, {1, 17, 16, 1}};
  for (const auto& d : dims) {
    const int64_t B = d[0], M = d[1], K = d[2], N = d[3];
    for (const Layout& la : layouts) {
      for (const Layout& lb : layouts) {
        for (bool broadcast_b : {false, true}) {
          const std::string name = std::string(la.name) + " a, " + lb.name + " b" +
                                   (broadcast_b ? " broadcast" : "") + ", (B, M, K, N) = (" +
                                   std::to_string(B) + ", " + std::to_string(M) + ", " +
                                   std::to_string(K) + ", " + std::to_string(N) + ")";
          CAPTURE(name);
          Operand a({B, M, K}, la.strides(M, K), 1);
          Shape b_strides = lb.strides(K, N);
          if (broadcast_b) b_strides[0] = 0;
          Operand b({B, K, N}, b_strides, 2);
          Operand out({B, M, N}, {M * N + 3, N + 1, 1}, 0);  // padded rows and batches
          Operand expected({B, M, N}, out.view.strides, 0);
          const auto plan = cuda::plan_gemm(out.view, a.view, b.view);
          REQUIRE(plan.has_value());
          host_gemm(*plan, static_cast<const double*>(b.view.data),
                    static_cast<const double*>(a.view.data), static_cast<double*>(out.view.data));
          reference_backend().matmul(expected.view, a.view, b.view);
          int64_t bad = 0;
          for (int64_t t = 0; t < B; ++t)
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                const int64_t at = t * out.view.strides[0] + i * out.view.strides[1] + j;
                bad += out.mem[at] != doctest::Approx(expected.mem[at]).epsilon(1e-12);
              }
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("no plan for a column-major out or an operand without a GEMM layout") {
  Operand a({2, 3, 4}, row_major(3, 4), 1), b({2, 4, 5}, row_major(4, 5), 2);
  Operand out({2, 3, 5}, row_major(3, 5), 0);
  CHECK(cuda::plan_gemm(out.view, a.view, b.view).has_value());
  Operand out_t({2, 3, 5}, col_major(3, 5), 0);
  CHECK_FALSE(cuda::plan_gemm(out_t.view, a.view, b.view).has_value());
  Operand out_bc({2, 3, 5}, {0, 5, 1}, 0);  // two batches into one matrix
  CHECK_FALSE(cuda::plan_gemm(out_bc.view, a.view, b.view).has_value());
  Operand gappy({2, 3, 4}, {24, 8, 2}, 1);
  CHECK_FALSE(cuda::plan_gemm(out.view, gappy.view, b.view).has_value());
}

// cuda::matmul_bias: linear's y = x @ w^T + bias (then relu) as one cuBLASLt call with the
// BIAS / RELU_BIAS epilogue on the plan of one batch entry. cuBLASLt adds its bias vector
// down the rows of column-major C, whose m rows are our out's N columns: run so on the host,
// the plan matches the reference matmul_bias (sum and bias in double, relu, one rounding).
TEST_CASE("the bias epilogue on a linear layer's plan matches the reference matmul_bias") {
  const int64_t shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {32, 512, 10}, {3, 1, 4}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], K = s[1], N = s[2];
    for (const bool relu : {false, true}) {
      CAPTURE(M);
      CAPTURE(K);
      CAPTURE(N);
      CAPTURE(relu);
      Operand x({1, M, K}, row_major(M, K), 1);
      Operand w({1, N, K}, row_major(N, K), -2);  // the weight (out, in); b = w^T
      Operand bias({1, 1, N}, row_major(1, N), 3);
      Operand out({1, M, N}, row_major(M, N), 0), expected({1, M, N}, row_major(M, N), 0);
      View wt = w.view;  // (1, K, N) with w's memory: column-major
      wt.shape = {1, K, N};
      wt.strides = {N * K, 1, K};
      const auto plan = cuda::plan_gemm(out.view, x.view, wt);
      REQUIRE(plan.has_value());
      CHECK(plan->m == N);  // bias's length: the epilogue's rows
      host_gemm(*plan, static_cast<const double*>(w.view.data), static_cast<const double*>(x.view.data),
                static_cast<double*>(out.view.data));
      for (int64_t j = 0; j < plan->n; ++j)
        for (int64_t i = 0; i < plan->m; ++i) {
          double& c = out.mem[i + j * plan->c.ld];
          c += bias.mem[i];
          if (relu && c < 0) c = 0;
        }
      const auto two_d = [](const View& v) {
        View r = v;
        r.shape.erase(r.shape.begin());
        r.strides.erase(r.strides.begin());
        return r;
      };
      View b1 = bias.view;
      b1.shape = {N};
      b1.strides = {1};
      reference_backend().matmul_bias(two_d(expected.view), two_d(x.view), two_d(wt), b1, relu);
      int64_t bad = 0;
      for (size_t i = 0; i < out.mem.size(); ++i) bad += out.mem[i] != doctest::Approx(expected.mem[i]).epsilon(1e-12);
      CHECK(bad == 0);
    }
  }
}

// Note [1x1 convolutions as GEMMs]: each direction's views, planned and run as cuBLAS would,
// give the reference convolution's result, in both layouts and with either filter layout.
TEST_CASE("1x1 convolutions as GEMMs match the reference convolution") {
  using cuda::ConvDirection;
  const auto strides = [](const Shape& s, bool nhwc) {
    return nhwc ? Shape{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]} : contiguous_strides(s);
  };
  // (N, Cin, Cout, H, W); a 1x1 filter is the same memory in KCRS and KRSC.
  const int64_t shapes[][5] = {{2, 3, 5, 4, 3}, {1, 1, 1, 1, 1}, {3, 8, 2, 1, 1},
                               {2, 1, 4, 2, 5}, {4, 6, 6, 3, 2}, {3, 4, 1, 2, 2}, {1, 3, 4, 2, 3}};
  const ConvDirection directions[] = {ConvDirection::forward, ConvDirection::backward_data,
                                      ConvDirection::backward_filter};
  const Conv2dParams p;
  int planned = 0, copied = 0;
  for (const auto& s : shapes) {
    const int64_t N = s[0], Cin = s[1], Cout = s[2], H = s[3], W = s[4];
    const Shape xs = {N, Cin, H, W}, ws = {Cout, Cin, 1, 1}, ys = {N, Cout, H, W};
    for (const bool nhwc : {false, true}) {
      for (const ConvDirection d : directions) {
        CAPTURE(shape_str(xs));
        CAPTURE(shape_str(ws));
        CAPTURE(nhwc);
        CAPTURE(static_cast<int>(d));
        Operand x(xs, strides(xs, nhwc), 1), w(ws, contiguous_strides(ws), -3), y(ys, strides(ys, nhwc), 2);
        Operand expected_x(xs, strides(xs, nhwc), 0), expected_w(ws, contiguous_strides(ws), 0),
            expected_y(ys, strides(ys, nhwc), 0);
        const cuda::Conv1x1Gemm route = cuda::conv1x1_gemm_route(d, x.view, w.view, y.view, p, nhwc);
        CHECK(route != cuda::Conv1x1Gemm::none);
        auto m = cuda::conv1x1_matmul(d, x.view, w.view, y.view, p, nhwc);
        std::optional<Operand> x_last, y_last;
        if (!m) {
          // The filter gradient of several NCHW images, no strided-batched GEMM: as
          // conv1x1_gemm does, on channels-last copies of x and dy.
          REQUIRE((d == ConvDirection::backward_filter && !nhwc));
          REQUIRE(route == cuda::Conv1x1Gemm::via_channels_last);
          x_last.emplace(xs, strides(xs, true), 0);
          y_last.emplace(ys, strides(ys, true), 0);
          reference_backend().copy(x_last->view, x.view);
          reference_backend().copy(y_last->view, y.view);
          m = cuda::conv1x1_matmul(d, x_last->view, w.view, y_last->view, p, true);
          REQUIRE(m.has_value());
          ++copied;
        } else {
          CHECK(route == cuda::Conv1x1Gemm::direct);
        }
        const auto plan = cuda::plan_gemm(m->out, m->a, m->b);
        REQUIRE(plan.has_value());
        ++planned;
        std::vector<double>* got = nullptr;
        const std::vector<double>* want = nullptr;
        switch (d) {
          case ConvDirection::forward:
            reference_backend().conv2d_forward(expected_y.view, x.view, w.view, nullptr, p);
            got = &y.mem, want = &expected_y.mem;
            break;
          case ConvDirection::backward_data:  // x is dx, y is dy
            reference_backend().conv2d_backward_data(expected_x.view, y.view, w.view, p);
            got = &x.mem, want = &expected_x.mem;
            break;
          case ConvDirection::backward_filter:  // w is dw, y is dy
            reference_backend().conv2d_backward_weights(expected_w.view, nullptr, y.view, x.view, p);
            got = &w.mem, want = &expected_w.mem;
            break;
        }
        host_gemm(*plan, static_cast<const double*>(m->b.data), static_cast<const double*>(m->a.data),
                  static_cast<double*>(m->out.data));
        int64_t bad = 0;
        for (size_t i = 0; i < got->size(); ++i) bad += (*got)[i] != doctest::Approx((*want)[i]).epsilon(1e-12);
        CHECK(bad == 0);
      }
    }
  }
  CHECK(planned == 7 * 2 * 3);
  // N = 1, and x and dy channels-last as well (H = W = 1), take no copies.
  CHECK(copied == 4);
}

TEST_CASE("no GEMM for a convolution that is not 1x1 stride 1 unpadded, or not dense in its layout") {
  using cuda::ConvDirection;
  Operand x({2, 3, 4, 4}, contiguous_strides({2, 3, 4, 4}), 1), y({2, 5, 4, 4}, contiguous_strides({2, 5, 4, 4}), 2);
  Operand w1({5, 3, 1, 1}, contiguous_strides({5, 3, 1, 1}), 3), w3({5, 3, 3, 3}, contiguous_strides({5, 3, 3, 3}), 3);
  Conv2dParams p;
  CHECK(cuda::conv1x1_matmul(ConvDirection::forward, x.view, w1.view, y.view, p, false).has_value());
  CHECK_FALSE(cuda::conv1x1_matmul(ConvDirection::forward, x.view, w1.view, y.view, p, true).has_value());
  CHECK(cuda::conv1x1_gemm_route(ConvDirection::backward_filter, x.view, w3.view, y.view, p, false) ==
        cuda::Conv1x1Gemm::none);
  Conv2dParams padded = p;
  padded.pad_top = padded.pad_bottom = padded.pad_left = padded.pad_right = 1;
  CHECK_FALSE(cuda::conv1x1_matmul(ConvDirection::forward, x.view, w3.view, y.view, padded, false).has_value());
  CHECK_FALSE(cuda::conv1x1_matmul(ConvDirection::forward, x.view, w1.view, y.view, padded, false).has_value());
  Operand y2({2, 5, 2, 2}, contiguous_strides({2, 5, 2, 2}), 2);
  Conv2dParams strided = p;
  strided.stride_h = strided.stride_w = 2;
  CHECK_FALSE(cuda::conv1x1_matmul(ConvDirection::forward, x.view, w1.view, y2.view, strided, false).has_value());
  View sliced = x.view;  // x[..., :3] of the 4 columns
  sliced.shape[3] = 3;
  Operand y3({2, 5, 4, 3}, contiguous_strides({2, 5, 4, 3}), 2);
  CHECK_FALSE(cuda::conv1x1_matmul(ConvDirection::forward, sliced, w1.view, y3.view, p, false).has_value());
}
