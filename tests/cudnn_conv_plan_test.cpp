// The host side of the cuDNN convolutions (kernels/cuda/cudnn_conv_plan.h): asymmetric
// padding as symmetric padding plus explicit zeros (checked against the reference kernels:
// both give the same convolution and gradients), which views cuDNN's descriptors take, and
// the choice among measured algorithms. No GPU needed.
#include <doctest/doctest.h>

#include <random>

#include "ringflow/kernels/cuda/cudnn_conv_plan.h"
#include "ringflow/tests/kernel_sweep.h"

namespace ringflow {
namespace {

using namespace sweep;
using cuda::ConvCandidate;

const Backend& ref() { return reference_backend(); }

// x (N, C, H, W) with the plan's extra rows and columns of zeros around it.
Buf pad_explicitly(const Buf& x, const cuda::ConvPadding& pad) {
  const Shape& s = x.v.shape;
  Buf big = make({s[0], s[1], s[2] + pad.extra_top + pad.extra_bottom,
                  s[3] + pad.extra_left + pad.extra_right}, x.v.dtype);
  ref().fill(big.v, 0.0);
  View inner = big.v;
  inner.shape = s;
  inner.data = static_cast<char*>(big.v.data) +
               (pad.extra_top * big.v.strides[2] + pad.extra_left * big.v.strides[3]) * dtype_size(x.v.dtype);
  ref().copy(inner, x.v);
  return big;
}

TEST_CASE("asymmetric padding = symmetric padding over explicit zeros, forward and backward") {
  std::mt19937 rng(21);
  const int64_t pads[][4] = {{0, 1, 0, 1}, {1, 0, 2, 1}, {2, 3, 1, 1}, {1, 1, 1, 1}, {0, 2, 3, 0}};
  for (auto& q : pads) {
    for (int64_t stride : {1, 2}) {
      Conv2dParams p;
      p.pad_top = q[0];
      p.pad_bottom = q[1];
      p.pad_left = q[2];
      p.pad_right = q[3];
      p.stride_h = p.stride_w = stride;
      const cuda::ConvPadding pad = cuda::conv_padding(p);
      CHECK(pad.pad_h + pad.extra_top == p.pad_top);
      CHECK(pad.pad_h + pad.extra_bottom == p.pad_bottom);
      CHECK(pad.pad_w + pad.extra_left == p.pad_left);
      CHECK(pad.pad_w + pad.extra_right == p.pad_right);
      CHECK((pad.extra_top == 0 || pad.extra_bottom == 0));
      CHECK(pad.explicit_zeros() == (q[0] != q[1] || q[2] != q[3]));

      const int64_t N = 2, C = 3, K = 5, H = 7, W = 6, R = 3, S = 3;
      const int64_t P = (H + q[0] + q[1] - R) / stride + 1, Q = (W + q[2] + q[3] - S) / stride + 1;
      Buf x = random({N, C, H, W}, DType::f64, Layout::nchw, rng);
      Buf w = random({K, C, R, S}, DType::f64, Layout::nchw, rng);
      Buf dy = random({N, K, P, Q}, DType::f64, Layout::nchw, rng);
      Conv2dParams sym = p;
      sym.pad_top = sym.pad_bottom = pad.pad_h;
      sym.pad_left = sym.pad_right = pad.pad_w;
      const Buf xp = pad_explicitly(x, pad);
      const std::string name = "pads " + shape_str({q[0], q[1], q[2], q[3]}) + " stride " + std::to_string(stride);

      Buf y1 = make({N, K, P, Q}, DType::f64), y2 = like(y1);
      ref().conv2d_forward(y1.v, x.v, w.v, nullptr, p);
      ref().conv2d_forward(y2.v, xp.v, w.v, nullptr, sym);
      CHECK(close(y2.v, y1.v, 1e-12, 1e-12, "forward " + name));

      // Backward-data into the padded buffer, then its interior: dx.
      Buf dx1 = like(x), dxp = like(xp);
      ref().conv2d_backward_data(dx1.v, dy.v, w.v, p);
      ref().conv2d_backward_data(dxp.v, dy.v, w.v, sym);
      View interior = dxp.v;
      interior.shape = x.v.shape;
      interior.data = static_cast<char*>(dxp.v.data) +
                      (pad.extra_top * dxp.v.strides[2] + pad.extra_left * dxp.v.strides[3]) * 8;
      CHECK(close(interior, dx1.v, 1e-12, 1e-12, "backward data " + name));

      Buf dw1 = like(w), dw2 = like(w);
      ref().conv2d_backward_weights(dw1.v, nullptr, dy.v, x.v, p);
      ref().conv2d_backward_weights(dw2.v, nullptr, dy.v, xp.v, sym);
      CHECK(close(dw2.v, dw1.v, 1e-12, 1e-12, "backward weights " + name));
    }
  }
}

TEST_CASE("tensor descriptors: NCHW and channels-last dense views; others are copied") {
  Buf nchw = make({2, 3, 5, 7}, DType::f32), nhwc = make({2, 3, 5, 7}, DType::f32, Layout::nhwc);
  const auto a = cuda::tensor_dims(nchw.v), b = cuda::tensor_dims(nhwc.v);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->sizes == std::array<int, 4>{2, 3, 5, 7});
  CHECK(a->strides == std::array<int, 4>{105, 35, 7, 1});
  CHECK(b->strides == std::array<int, 4>{105, 1, 21, 3});
  // Size-1 dims: any stride in the view, the dense layout's in the descriptor.
  Buf one = make_strided({1, 4, 1, 1}, {999, 1, 77, 5}, DType::f32);
  const auto c = cuda::tensor_dims(one.v);
  REQUIRE(c);
  CHECK(c->strides == std::array<int, 4>{4, 1, 1, 1});
  // A broadcast (stride 0) and a transposed H/W have no descriptor.
  CHECK_FALSE(cuda::tensor_dims(make_strided({2, 3, 5, 7}, {0, 35, 7, 1}, DType::f32).v));
  CHECK_FALSE(cuda::tensor_dims(make_strided({2, 3, 5, 7}, {105, 35, 1, 5}, DType::f32).v));
  CHECK_FALSE(cuda::tensor_dims(make({3, 5, 7}, DType::f32).v));
  CHECK(cuda::filter_layout(make({4, 3, 3, 3}, DType::f32).v) == cuda::FilterLayout::nchw);
  CHECK(cuda::filter_layout(make({4, 3, 3, 3}, DType::f32, Layout::nhwc).v) == cuda::FilterLayout::nhwc);
  CHECK_FALSE(cuda::filter_layout(make_strided({4, 3, 3, 3}, {1, 4, 12, 36}, DType::f32).v));
}

TEST_CASE("the algorithm choice: fastest that ran, fits, and keeps f32 on FMA math unless TF32 is allowed") {
  using cuda::ConvMath;
  const ConvCandidate c[] = {
      {0, true, ConvMath::fma, 3.0f, 0},
      {1, false, ConvMath::fma, 0.1f, 0},                     // failed
      {2, true, ConvMath::fma, 1.0f, size_t{1} << 31},        // more workspace than allowed
      {3, true, ConvMath::tensor_ops, 0.5f, 1024},            // tensor cores
      {4, true, ConvMath::fma, 2.0f, 4096},
      {5, true, ConvMath::default_math, 1.5f, 0},             // may be TF32 for f32
  };
  const size_t limit = size_t{1} << 30;
  CHECK(cuda::choose_algorithm(c, 6, DType::f32, /*allow_tf32=*/false, limit)->algo == 4);
  CHECK(cuda::choose_algorithm(c, 6, DType::f32, /*allow_tf32=*/true, limit)->algo == 3);
  CHECK(cuda::choose_algorithm(c, 6, DType::f16, /*allow_tf32=*/false, limit)->algo == 3);
  CHECK(cuda::choose_algorithm(c, 6, DType::f64, /*allow_tf32=*/true, limit)->algo == 5);
  CHECK(cuda::choose_algorithm(c, 6, DType::f32, false, 0)->algo == 0);
  CHECK_FALSE(cuda::choose_algorithm(c + 1, 1, DType::f32, true, limit));
  CHECK_FALSE(cuda::choose_algorithm(c, 0, DType::f32, true, limit));
}

TEST_CASE("the search's workspace limit: 1 GiB unless set for the process; 0 is refused") {
  CHECK(cudnn_workspace_limit() == size_t{1} << 30);
  set_cudnn_workspace_limit(size_t{4} << 30);
  CHECK(cudnn_workspace_limit() == size_t{4} << 30);
  CHECK_THROWS_AS(set_cudnn_workspace_limit(0), std::invalid_argument);
  CHECK(cudnn_workspace_limit() == size_t{4} << 30);
  set_cudnn_workspace_limit(size_t{1} << 30);
}

TEST_CASE("graph engines: 16-bit takes tensor cores, f32 only with TF32, f64 never (the notes decide)") {
  using cuda::ConvMath;
  using cuda::EngineNotes;
  EngineNotes tc, down, plain, reduced, nvrtc;
  tc.tensor_core = true;
  down.down_convert_inputs = true;
  reduced.tensor_core = reduced.reduced_precision_reduction = true;
  nvrtc.runtime_compilation = true;
  CHECK(cuda::engine_math(tc) == ConvMath::tensor_ops);
  CHECK(cuda::engine_math(down) == ConvMath::tensor_ops);
  CHECK(cuda::engine_math(plain) == ConvMath::fma);
  CHECK(cuda::engine_tried(tc));
  CHECK(cuda::engine_tried(plain));
  CHECK_FALSE(cuda::engine_tried(reduced));
  CHECK_FALSE(cuda::engine_tried(nvrtc));
  for (DType dt : {DType::f16, DType::bf16}) {
    CHECK(cuda::qualifies(ConvMath::tensor_ops, dt, /*allow_tf32=*/false));
    CHECK(cuda::qualifies(ConvMath::fma, dt, false));
  }
  CHECK_FALSE(cuda::qualifies(ConvMath::tensor_ops, DType::f32, false));
  CHECK_FALSE(cuda::qualifies(ConvMath::default_math, DType::f32, false));
  CHECK(cuda::qualifies(ConvMath::tensor_ops, DType::f32, true));
  CHECK_FALSE(cuda::qualifies(ConvMath::tensor_ops, DType::f64, true));
  CHECK(cuda::qualifies(ConvMath::default_math, DType::f64, false));

  // Both APIs compete on their times: a graph tensor-core engine beats the legacy algorithm
  // for bf16 (and for f32 with TF32), never for f32 without it.
  ConvCandidate legacy{1, true, ConvMath::tensor_ops, 2.0f, 0};
  ConvCandidate legacy_fma{0, true, ConvMath::fma, 4.0f, 0};
  ConvCandidate graph{0, true, cuda::engine_math(tc), 0.5f, 4096};
  graph.source = cuda::ConvSource::graph;
  graph.engine = 12;
  ConvCandidate graph_fma{1, true, cuda::engine_math(plain), 3.0f, 0};
  graph_fma.source = cuda::ConvSource::graph;
  const ConvCandidate all[] = {legacy, legacy_fma, graph, graph_fma};
  const size_t limit = size_t{1} << 30;
  const auto bf16 = cuda::choose_algorithm(all, 4, DType::bf16, false, limit);
  CHECK(bf16->source == cuda::ConvSource::graph);
  CHECK(bf16->engine == 12);
  const auto f32 = cuda::choose_algorithm(all, 4, DType::f32, false, limit);
  CHECK(f32->source == cuda::ConvSource::graph);
  CHECK(f32->math == ConvMath::fma);
  CHECK(cuda::choose_algorithm(all, 4, DType::f32, true, limit)->engine == 12);
  CHECK(cuda::describe_candidate(graph) == "graph engine 12 #1 tensor-ops 4096 B 0.500 ms");
  graph.rank = 2;
  CHECK(cuda::describe_candidate(graph) == "graph engine 12 #3 tensor-ops 4096 B 0.500 ms");
  graph.fallback = true;
  CHECK(cuda::describe_candidate(graph) == "graph engine 12 fallback #3 tensor-ops 4096 B 0.500 ms");
  CHECK(cuda::describe_candidate(ConvCandidate{3, false, ConvMath::fma, 0, 0}) == "algo 3 fma failed");
}

TEST_CASE("the graph configurations a search times: the first that could qualify, in cuDNN's order") {
  using cuda::EngineNotes;
  EngineNotes tc, plain, nvrtc;
  tc.tensor_core = true;
  nvrtc.runtime_compilation = true;
  // As Hopper's instant heuristics often rank f32 convolutions: tensor-core engines first.
  const std::vector<EngineNotes> list = {tc, tc, nvrtc, tc, plain, tc, plain, plain, tc, plain};
  CHECK(cuda::configs_to_time(list, DType::f32, false, 3) == std::vector<size_t>{4, 6, 7});
  CHECK(cuda::configs_to_time(list, DType::f32, false, 8) == std::vector<size_t>{4, 6, 7, 9});
  CHECK(cuda::configs_to_time(list, DType::f32, true, 3) == std::vector<size_t>{0, 1, 3});
  CHECK(cuda::configs_to_time(list, DType::bf16, false, 4) == std::vector<size_t>{0, 1, 3, 4});
  CHECK(cuda::configs_to_time(list, DType::f64, false, 2) == std::vector<size_t>{4, 6});
  CHECK(cuda::configs_to_time({}, DType::f32, false, 8).empty());
}

TEST_CASE("the legacy API is searched for 16-bit only when the graph API has nothing that qualifies") {
  using cuda::ConvMath;
  ConvCandidate fast{0, true, ConvMath::tensor_ops, 0.5f, 4096};
  fast.source = cuda::ConvSource::graph;
  ConvCandidate failed = fast, too_big = fast;
  failed.ok = false;
  too_big.workspace = size_t{1} << 31;
  const size_t limit = size_t{1} << 30;
  for (DType dt : {DType::f16, DType::bf16}) {
    CHECK_FALSE(cuda::search_legacy(dt, false, &fast, 1, limit));
    CHECK(cuda::search_legacy(dt, false, &fast, 0, limit));     // the graph API refused the shape
    CHECK(cuda::search_legacy(dt, false, &failed, 1, limit));
    CHECK(cuda::search_legacy(dt, false, &too_big, 1, limit));
  }
  // f32 and f64 always search both APIs, whatever the graph API found.
  ConvCandidate fma = fast;
  fma.math = ConvMath::fma;
  for (bool tf32 : {false, true}) {
    CHECK(cuda::search_legacy(DType::f32, tf32, &fma, 1, limit));
    CHECK(cuda::search_legacy(DType::f32, tf32, &fast, 1, limit));
  }
  CHECK(cuda::search_legacy(DType::f64, false, &fma, 1, limit));
}

TEST_CASE("the graph API's view of a convolution: dims, strides, ids, alignment, paddings") {
  Buf x = make({2, 3, 5, 7}, DType::bf16, Layout::nhwc), w = make({4, 3, 3, 3}, DType::bf16, Layout::nhwc);
  Buf y = make({2, 4, 3, 4}, DType::bf16, Layout::nhwc);
  Conv2dParams p;
  p.pad_top = 1;
  p.pad_bottom = 0;
  p.pad_left = 1;
  p.pad_right = 2;
  p.stride_h = p.stride_w = 2;
  const auto s = cuda::conv_graph_spec(cuda::ConvDirection::backward_filter, x.v, w.v, y.v, p);
  REQUIRE(s);
  CHECK(s->direction == cuda::ConvDirection::backward_filter);
  CHECK(s->dtype == DType::bf16);
  CHECK(s->x.dims == std::array<int64_t, 4>{2, 3, 5, 7});
  CHECK(s->x.strides == std::array<int64_t, 4>{105, 1, 21, 3});
  CHECK(s->w.strides == std::array<int64_t, 4>{27, 1, 9, 3});
  CHECK(s->x.uid == cuda::kUidX);
  CHECK(s->w.uid == cuda::kUidW);
  CHECK(s->y.uid == cuda::kUidY);
  CHECK(s->pre_padding == std::array<int64_t, 2>{1, 1});
  CHECK(s->post_padding == std::array<int64_t, 2>{0, 2});
  CHECK(s->stride == std::array<int64_t, 2>{2, 2});
  CHECK(s->dilation == std::array<int64_t, 2>{1, 1});
  CHECK(cuda::graph_alignment(256) == 16);
  CHECK(cuda::graph_alignment(2) == 2);
  View offset = x.v;
  offset.data = static_cast<char*>(x.v.data) + 2;  // a view one bf16 element in
  CHECK(cuda::conv_graph_spec(cuda::ConvDirection::forward, offset, w.v, y.v, p)->x.alignment <= 2);
  // A broadcast operand has no descriptor: the caller copies it dense first.
  CHECK_FALSE(cuda::conv_graph_spec(cuda::ConvDirection::forward, make_strided({2, 3, 5, 7}, {0, 1, 21, 3},
                                                                                DType::bf16).v,
                                    w.v, y.v, p));
}

TEST_CASE("the algorithm cache key tells apart every input of the choice") {
  cuda::ConvKey a;
  a.x = *cuda::tensor_dims(make({2, 3, 5, 7}, DType::f32).v);
  cuda::ConvKey b = a;
  CHECK_FALSE(a < b);
  CHECK_FALSE(b < a);
  CHECK(cuda::alignment(reinterpret_cast<void*>(0x1000)) == 256);
  CHECK(cuda::alignment(reinterpret_cast<void*>(0x1008)) == 8);
  CHECK(cuda::alignment(reinterpret_cast<void*>(0x1002)) == 2);
  for (int change = 0; change < 7; ++change) {
    cuda::ConvKey c = a;
    if (change == 0) c.device = 1;
    if (change == 1) c.direction = cuda::ConvDirection::backward_filter;
    if (change == 2) c.dtype = DType::bf16;
    if (change == 3) c.tf32 = true;
    if (change == 4) c.x.strides[1] = 1;
    if (change == 5) c.params[2] = 2;
    if (change == 6) c.align[0] = 2;
    CHECK(((a < c) || (c < a)));
  }
}

}  // namespace
}  // namespace ringflow
