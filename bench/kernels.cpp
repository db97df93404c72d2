// Kernel microbenchmarks on the CPU (--device cuda: bench/kernels_cuda.cpp): conv forward /
// backward-data / backward-weights at the VGG-11 CIFAR-10 layer shapes and matmul (VGG-11 classifier and sgemm 2048^3), each through
// ringflow's user-facing op call path and through raw oneDNN (primitive built once, same
// layouts, same memory). Every GFLOP/s is also given as a percent of the machine ceiling
// measured in the same run (dnnl_sgemm 2048^3, which beats the matmul primitive there).
//
// What each row times, per call (the op path's output is checked against raw once):
//   conv_fwd          op:  y = conv2d(x, w, b) with w, b requiring grad, as in training
//                          (output allocation and autograd node included).
//                     raw: convolution_forward (forward_training).
//   conv_bwd_data     op:  y.backward(dy, retain_graph) on a graph recorded once where only
//                          x requires grad; x.grad is reset to none before each call (as an
//                          optimizer's zero_grad(set_to_none)), so the call is the autograd
//                          pass, the dx allocation and the backward-data kernel, nothing else.
//                     raw: convolution_backward_data.
//   conv_bwd_weights  op:  as conv_bwd_data with only w and b requiring grad (dw and db).
//                     raw: convolution_backward_weights + the reorder of dw to plain OIHW
//                          (the layout a ringflow weight gradient has).
//   matmul / linear   op:  matmul(a, b) / linear(x, w) (no bias: the same product as raw).
//                     raw: matmul primitive, weights read transposed in place for linear.
// Activations are channels-last (what ringflow allocates conv outputs in on the CPU);
// weights are plain OIHW and reordered by both paths once, not per call (the weights do
// not change between calls). The op path releases its previous result before each call,
// as a training step frees the last step's tensors, so the allocator hands the same block
// back (raw writes one preallocated buffer). The two paths are timed alternately (one raw
// call, one op call, ...) so that load from elsewhere hits both alike; times are medians
// of at least --repeat calls and 300 ms per row.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "ringflow/apps/choices.h"
#include "ringflow/bench/ceiling.h"
#include "ringflow/bench/conv_layers.h"
#include "ringflow/bench/conv_table.h"
#include "ringflow/bench/kernels_cuda.h"
#include "ringflow/framework/ringflow.h"

namespace {

using namespace ringflow;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using Call = std::function<void()>;

// ---------------------------------------------------------------- timing
struct Timing {
  int warmup = 3;
  int repeat = 10;       // at least this many timed calls per path
  double min_ms = 300;   // and at least this much time in them (tiny rows get more calls)
};

double ms_of(const Call& fn) {
  const auto a = std::chrono::steady_clock::now();
  fn();
  const auto b = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of each call; the calls are timed in turn (one of each, again, ...) after
// warm-up, so that load from elsewhere hits them alike.
std::vector<double> time_calls(const Timing& t, const std::vector<Call>& calls) {
  for (int i = 0; i < t.warmup; ++i)
    for (const Call& c : calls) c();
  std::vector<std::vector<double>> ms(calls.size());
  double total = 0;
  for (int i = 0; i < t.repeat || total < t.min_ms; ++i) {
    for (size_t k = 0; k < calls.size(); ++k) {
      ms[k].push_back(ms_of(calls[k]));
      total += ms[k].back();
    }
  }
  std::vector<double> out;
  for (auto& v : ms) out.push_back(median(std::move(v)));
  return out;
}

// ---------------------------------------------------------------- rows
struct Row {
  std::string op, shape;
  double gflop = 0;
  double raw_ms = 0, op_ms = 0;
  // f32 rows: the rms difference between the two paths' results relative to the raw one's
  // rms (an element-wise relative difference would flag outputs near zero of long sums that
  // merely add in another order: ~1e-3 at 65536 terms, against rms ones of a few 1e-6).
  // 16-bit rows: the op path's rms error against the f32 result of the same operands,
  // relative to its rms (raw_error: the same for raw), as the two may round differently by
  // design.
  double check = 0;
  double raw_error = -1;
  double tolerance = 1e-4;
  bool ok() const { return check < tolerance; }
};

// (op result, raw result) pairs, read after the timing.
using Pairs = std::vector<std::pair<Tensor, Tensor>>;
using Results = std::function<Pairs()>;
// For 16-bit rows: the f32 results of the same operands, one per pair.
using Truths = std::vector<Tensor>;

// rms(got - want) / rms(want), compared in logical order.
double rms_rel_diff(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  if (g.size() != w.size()) return INFINITY;
  double err = 0, norm = 0;
  for (size_t j = 0; j < w.size(); ++j) {
    err += (double(g[j]) - w[j]) * (double(g[j]) - w[j]);
    norm += double(w[j]) * w[j];
  }
  return std::sqrt(err / std::max(norm, 1e-300));
}

// Largest over pairs of rms_rel_diff(op, raw).
double rms_rel_diff(const Pairs& pairs) {
  double worst = 0;
  for (const auto& [op, raw] : pairs) worst = std::max(worst, rms_rel_diff(op, raw));
  return worst;
}

// Largest over pairs of rms_rel_diff(got, truth), got being each pair's first (op) or second
// (raw) result.
double rms_error(const Pairs& pairs, const Truths& truths, bool raw) {
  double worst = 0;
  for (size_t i = 0; i < pairs.size(); ++i)
    worst = std::max(worst, rms_rel_diff(raw ? pairs[i].second : pairs[i].first, truths[i]));
  return worst;
}

Row measure(const Timing& t, std::string op, std::string shape, double gflop, const Call& raw,
            const Call& op_call, const Results& results, const Truths& truths = {}) {
  Row r{std::move(op), std::move(shape), gflop};
  const std::vector<double> ms = time_calls(t, {raw, op_call});
  r.raw_ms = ms[0];
  r.op_ms = ms[1];
  if (truths.empty()) {
    r.check = rms_rel_diff(results());
  } else {  // a few bf16 epsilons (2^-8)
    const Pairs got = results();
    r.check = rms_error(got, truths, false);
    r.raw_error = rms_error(got, truths, true);
    r.tolerance = 1e-2;
  }
  return r;
}

Tensor uniform(const Shape& shape, DType dtype = DType::f32) {
  return ringflow::rand(shape, nullptr, DType::f32, -1.0, 1.0).to(dtype);
}

// ---------------------------------------------------------------- raw oneDNN
dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

dnnl::memory mem(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, engine(), t.raw_data());
}

// A primitive with its arguments, run on the stream.
Call run(dnnl::primitive prim, std::unordered_map<int, dnnl::memory> args) {
  return [prim, args] { prim.execute(stream(), args); };
}

struct ConvShape {
  int64_t N, C, K, H, W;  // 3x3, stride 1, pad 1
  DType dtype = DType::f32;
};

dt of(DType d) { return d == DType::bf16 ? dt::bf16 : dt::f32; }

// The descriptors every raw conv primitive shares, and the forward pd (the backward hint).
struct RawConv {
  dnnl::memory::desc x_md, y_md, w_user_md, w_any, b_md;
  dnnl::memory::dims strides{1, 1}, dil{0, 0}, pad{1, 1};
  dnnl::convolution_forward::primitive_desc fwd_pd;
  explicit RawConv(const ConvShape& s)
      : x_md({s.N, s.C, s.H, s.W}, of(s.dtype), tag::nhwc),
        y_md({s.N, s.K, s.H, s.W}, of(s.dtype), tag::nhwc),
        w_user_md({s.K, s.C, 3, 3}, of(s.dtype), tag::oihw),
        w_any({s.K, s.C, 3, 3}, of(s.dtype), tag::any),
        b_md({s.K}, of(s.dtype), tag::a) {
    fwd_pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        x_md, w_any, b_md, y_md, strides, dil, pad, pad),
        engine());
  }
};

// User weights reordered into `want` once (outside the timing).
dnnl::memory weights_for(const dnnl::memory::desc& want, const dnnl::memory::desc& user_md, const Tensor& w) {
  dnnl::memory user = mem(user_md, w);
  if (want == user_md) return user;
  dnnl::memory m(want, engine());
  dnnl::reorder(user, m).execute(stream(), user, m);
  return m;
}

Call raw_conv_fwd(const RawConv& rc, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  return run(dnnl::convolution_forward(rc.fwd_pd),
             {{DNNL_ARG_SRC, mem(rc.x_md, x)},
              {DNNL_ARG_WEIGHTS, weights_for(rc.fwd_pd.weights_desc(), rc.w_user_md, w)},
              {DNNL_ARG_BIAS, mem(rc.b_md, b)},
              {DNNL_ARG_DST, mem(rc.y_md, y)}});
}

Call raw_conv_bwd_data(const RawConv& rc, const Tensor& dx, const Tensor& w, const Tensor& dy) {
  dnnl::convolution_backward_data::primitive_desc pd(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, rc.x_md, rc.w_any, rc.y_md,
                                            rc.strides, rc.dil, rc.pad, rc.pad),
      engine(), rc.fwd_pd);
  return run(dnnl::convolution_backward_data(pd),
             {{DNNL_ARG_DIFF_DST, mem(rc.y_md, dy)},
              {DNNL_ARG_WEIGHTS, weights_for(pd.weights_desc(), rc.w_user_md, w)},
              {DNNL_ARG_DIFF_SRC, mem(rc.x_md, dx)}});
}

// dw ends in plain OIHW, as ringflow delivers it (reorder included when needed).
Call raw_conv_bwd_weights(const RawConv& rc, const Tensor& dw, const Tensor& db, const Tensor& dy,
                          const Tensor& x) {
  dnnl::convolution_backward_weights::primitive_desc pd(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, rc.x_md, rc.w_any, rc.b_md,
                                               rc.y_md, rc.strides, rc.dil, rc.pad, rc.pad),
      engine(), rc.fwd_pd);
  const dnnl::memory user = mem(rc.w_user_md, dw);
  const bool reorder = pd.diff_weights_desc() != rc.w_user_md;
  const dnnl::memory dwm = reorder ? dnnl::memory(pd.diff_weights_desc(), engine()) : user;
  const Call conv = run(dnnl::convolution_backward_weights(pd), {{DNNL_ARG_SRC, mem(rc.x_md, x)},
                                                                 {DNNL_ARG_DIFF_DST, mem(rc.y_md, dy)},
                                                                 {DNNL_ARG_DIFF_WEIGHTS, dwm},
                                                                 {DNNL_ARG_DIFF_BIAS, mem(rc.b_md, db)}});
  if (!reorder) return conv;
  const Call to_user = run(dnnl::reorder(dwm, user), {{DNNL_ARG_FROM, dwm}, {DNNL_ARG_TO, user}});
  return [conv, to_user] { conv(), to_user(); };
}

// The machine ceiling: GFLOP/s of oneDNN's sgemm on 2048^3 (bench/ceiling.h).
double sgemm_ceiling(const Timing& t) {
  return bench::sgemm_ceiling_gflops(t.warmup, t.repeat, t.min_ms);
}

// out (M, N) = a (M, K) @ b (K, N); b_t: b is the transpose of a row-major (N, K) weight.
Call raw_matmul(const Tensor& a, const Tensor& b, bool b_t, const Tensor& out) {
  const int64_t M = a.size(0), K = a.size(1), N = out.size(1);
  dnnl::memory::desc a_md({M, K}, dt::f32, tag::ab), o_md({M, N}, dt::f32, tag::ab);
  dnnl::memory::desc b_md({K, N}, dt::f32, b_t ? tag::ba : tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, o_md), engine());
  return run(dnnl::matmul(pd), {{DNNL_ARG_SRC, mem(a_md, a)}, {DNNL_ARG_WEIGHTS, mem(b_md, b)}, {DNNL_ARG_DST, mem(o_md, out)}});
}

// ---------------------------------------------------------------- ringflow op path
// One backward pass from y (graph kept) with the leaves' .grad reset to none first.
Call op_backward(const Tensor& y, const Tensor& dy, const std::vector<Tensor>& leaves) {
  return [=] {
    for (const Tensor& l : leaves) l.set_grad(Tensor());
    y.backward(dy, /*retain_graph=*/true);
  };
}

// x (N, C, H, W) channels-last, w (K, C, 3, 3), b (K): requires_grad set per row.
struct ConvInputs {
  Tensor x, w, b, dy;
  explicit ConvInputs(const ConvShape& s)
      : x(uniform({s.N, s.C, s.H, s.W}, s.dtype).channels_last()),
        w(uniform({s.K, s.C, 3, 3}, s.dtype)),
        b(uniform({s.K}, s.dtype)),
        dy(uniform({s.N, s.K, s.H, s.W}, s.dtype).channels_last()) {}
  // Fresh leaves on the same memory, with requires_grad as given.
  ConvInputs leaves(bool rx, bool rw) const {
    ConvInputs c = *this;
    c.x = x.detach().requires_grad_(rx);
    c.w = w.detach().requires_grad_(rw);
    c.b = b.detach().requires_grad_(rw);
    return c;
  }
};

// The f32 forward and backward of a 16-bit row's operands: y, dx, dw, db.
Truths f32_truths(const ConvInputs& in, const Conv2dParams& p) {
  const Tensor x = in.x.to(DType::f32).requires_grad_(), w = in.w.to(DType::f32).requires_grad_(),
               b = in.b.to(DType::f32).requires_grad_();
  const Tensor y = conv2d(x, w, b, p);
  y.backward(in.dy.to(DType::f32));
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

std::vector<Row> conv_rows(const Timing& t, const ConvShape& s) {
  const std::string shape =
      fmt::format("N{} {}->{} {}x{} 3x3{}", s.N, s.C, s.K, s.H, s.W, s.dtype == DType::bf16 ? " bf16" : "");
  const double gflop = 2.0 * s.N * s.K * s.H * s.W * s.C * 9 / 1e9;
  const Conv2dParams p = conv2d_params({1, 1}, {1, 1});
  const RawConv rc(s);
  const ConvInputs in(s);
  const Truths truth = s.dtype == DType::f32 ? Truths{} : f32_truths(in, p);
  auto truths = [&](size_t first, size_t count) {
    return truth.empty() ? Truths{} : Truths(truth.begin() + first, truth.begin() + first + count);
  };
  std::vector<Row> rows;

  {  // forward, as in training (w and b require grad)
    const ConvInputs c = in.leaves(false, true);
    const Tensor y_raw = empty_channels_last({s.N, s.K, s.H, s.W}, s.dtype);
    Tensor y_op;
    rows.push_back(measure(t, "conv_fwd", shape, gflop, raw_conv_fwd(rc, c.x, c.w, c.b, y_raw),
                           [&] { y_op = {}, y_op = conv2d(c.x, c.w, c.b, p); }, [&] { return Pairs{{y_op, y_raw}}; }, truths(0, 1)));
  }
  if (s.C >= 16) {  // the first layer needs no dx
    const ConvInputs c = in.leaves(true, false);
    const Tensor y = conv2d(c.x, c.w, c.b, p), dx_raw = empty_channels_last(c.x.shape(), s.dtype);
    rows.push_back(measure(t, "conv_bwd_data", shape, gflop, raw_conv_bwd_data(rc, dx_raw, c.w, c.dy),
                           op_backward(y, c.dy, {c.x}), [&] { return Pairs{{c.x.grad(), dx_raw}}; }, truths(1, 1)));
  }
  {
    const ConvInputs c = in.leaves(false, true);
    const Tensor y = conv2d(c.x, c.w, c.b, p), dw_raw = empty(c.w.shape(), s.dtype),
                 db_raw = empty(c.b.shape(), s.dtype);
    rows.push_back(measure(t, "conv_bwd_weights", shape, gflop,
                           raw_conv_bwd_weights(rc, dw_raw, db_raw, c.dy, c.x), op_backward(y, c.dy, {c.w, c.b}),
                           [&] { return Pairs{{c.w.grad(), dw_raw}, {c.b.grad(), db_raw}}; }, truths(2, 2)));
  }
  return rows;
}

// matmul: matmul(a (M, K), b (K, N)). linear: linear(x (M, K), w (N, K)), i.e. x @ w^T.
Row matmul_row(const Timing& t, const std::string& name, int64_t M, int64_t K, int64_t N, bool is_linear) {
  const Tensor a = uniform({M, K}), b = uniform(is_linear ? Shape{N, K} : Shape{K, N});
  const Tensor out_raw = empty({M, N});
  Tensor out_op;
  const Call op = is_linear ? Call([&] { out_op = {}, out_op = linear(a, b); })
                          : Call([&] { out_op = {}, out_op = matmul(a, b); });
  return measure(t, name, fmt::format("{}x{}x{}{}", M, K, N, is_linear ? " b^T" : ""), 2.0 * M * K * N / 1e9,
                 raw_matmul(a, b, is_linear, out_raw), op, [&] { return Pairs{{out_op, out_raw}}; });
}

// ---------------------------------------------------------------- output
void print_table(const std::vector<Row>& rows, double ceiling) {
  fmt::print("threads {}  ceiling (raw oneDNN dnnl_sgemm 2048^3) {:.0f} GFLOP/s\n", num_threads(), ceiling);
  fmt::print("{:<17} {:<27} {:>9} {:>8} {:>6} {:>9} {:>8} {:>6} {:>6} {:>8} {:>8}\n", "op", "shape", "raw ms",
             "GFLOP/s", "%ceil", "op ms", "GFLOP/s", "%ceil", "op/raw", "check", "raw err");
  for (const Row& r : rows) {
    const double g_raw = r.gflop / (r.raw_ms / 1e3), g_op = r.gflop / (r.op_ms / 1e3);
    const std::string raw_error = r.raw_error < 0 ? "-" : fmt::format("{:.1e}", r.raw_error);
    fmt::print("{:<17} {:<27} {:>9.3f} {:>8.1f} {:>5.0f}% {:>9.3f} {:>8.1f} {:>5.0f}% {:>6.3f} {:>8.1e} {:>8}{}\n",
               r.op, r.shape, r.raw_ms, g_raw, 100 * g_raw / ceiling, r.op_ms, g_op, 100 * g_op / ceiling,
               r.op_ms / r.raw_ms, r.check, raw_error, r.ok() ? "" : "  MISMATCH");
  }
}

void print_json(const std::vector<Row>& rows, double ceiling) {
  for (const Row& r : rows) {
    const double g_raw = r.gflop / (r.raw_ms / 1e3), g_op = r.gflop / (r.op_ms / 1e3);
    nlohmann::json j{{"op", r.op},
                           {"shape", r.shape},
                           {"gflop", r.gflop},
                           {"threads", num_threads()},
                           {"ceiling_gflops", ceiling},
                           {"raw_onednn_ms", r.raw_ms},
                           {"raw_onednn_gflops", g_raw},
                           {"raw_onednn_pct_ceiling", 100 * g_raw / ceiling},
                           {"op_ms", r.op_ms},
                           {"op_gflops", g_op},
                           {"op_pct_ceiling", 100 * g_op / ceiling},
                           {"ratio_op_over_raw", r.op_ms / r.raw_ms},
                           {r.raw_error < 0 ? "rms_rel_diff_vs_raw" : "op_rms_error_vs_f32", r.check}};
    if (r.raw_error >= 0) j["raw_rms_error_vs_f32"] = r.raw_error;
    fmt::print("{}\n", j.dump());
  }
}

// (C, K, H = W) of each distinct 3x3 stride-1 pad-1 convolution of the model (what conv_rows
// times), from its forward pass (bench/conv_layers.h).
std::vector<std::array<int64_t, 3>> square_3x3_layers(const std::string& model) {
  std::vector<std::array<int64_t, 3>> out;
  for (const bench::ConvLayer& l : bench::distinct_layers(bench::conv_layers(model, 1))) {
    const Conv2dParams& p = l.params;
    const bool same = p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 1 && p.pad_bottom == 1 &&
                      p.pad_left == 1 && p.pad_right == 1 && p.dilation_h == 1 && p.dilation_w == 1;
    if (same && l.w[2] == 3 && l.w[3] == 3 && l.x[2] == l.x[3]) out.push_back({l.x[1], l.w[0], l.x[2]});
  }
  return out;
}

// --list-layers: the convolution layers of each model (bench/conv_layers.h) as JSON lines, in
// bench/torch_conv_layers.py --list's fields, so that a test compares the two.
void list_layers(const std::vector<std::string>& models, int64_t batch) {
  for (const std::string& model : models)
    for (const bench::ConvLayer& l : bench::conv_layers(model, batch)) {
      nlohmann::json j = bench::layer_json(l);
      j["model"] = model;
      fmt::print("{}\n", j.dump());
    }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringflow kernel benchmarks: ringflow's op call path vs raw oneDNN (cpu) or raw cuDNN and "
               "PyTorch (cuda)"};
  int threads = 0;
  std::vector<int64_t> batches{64, 256};
  Timing timing;
  bool json = false;
  DeviceType device = DeviceType::cpu;
  DType dtype = DType::f32;
  bool list = false;
  enum class Shapes { vgg11, resnet18 } shapes = Shapes::vgg11;
  bench::CudaKernelOptions cuda;
  cuda.models = {"vgg11_cifar", "resnet18_cifar", "resnet50"};
  cuda.torch_script = RINGFLOW_SOURCE_ROOT "/bench/torch_conv_layers.py";
  using ringflow::apps::add_choice;
  add_choice(app, "--device", device, {{"cpu", DeviceType::cpu}, {"cuda", DeviceType::cuda}},
             "cpu: the VGG-11 / ResNet-18 3x3 layers and matmuls vs raw oneDNN; cuda: every conv layer of "
             "--models vs raw cuDNN and PyTorch, forward, backward-data, backward-weights (exit 77 without a "
             "CUDA device)");
  app.add_flag("--tf32", cuda.tf32, "--device cuda: allow TF32 tensor cores for f32, on every path");
  app.add_option("--threads", threads, "threads (default: all cores)");
  app.add_option("--batch", batches, "batch sizes (cpu: of the conv and classifier rows, default 64 256; "
                                     "cuda: default 256)")->expected(1, -1);
  app.add_option("--repeat", timing.repeat, "least timed calls per row and path (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "print one JSON object per row");
  add_choice(app, "--dtype", dtype,
             {{"f32", DType::f32}, {"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16},
              {"f16", DType::f16}},
             "convolutions' dtype, for every path (cpu: f32 or bf16, raw: oneDNN's direct kernels)");
  add_choice(app, "--shapes", shapes, {{"vgg11", Shapes::vgg11}, {"resnet18", Shapes::resnet18}},
             "cpu: the distinct 3x3 stride-1 convolution layers of vgg11_cifar or resnet18_cifar");
  app.add_option("--models", cuda.models, "cuda, --list-layers: models whose convolution layers are timed "
                                          "(models/registry.h names)")->expected(1, -1);
  add_choice(app, "--memory-format", cuda.memory_format,
             apps::choices_from(kMemoryFormats, memory_format_name),
             "cuda: activations' layout on every path (auto: nhwc for 16-bit, nchw for f32, as ringflow's auto)");
  app.add_flag("--list-layers", list, "print the convolution layers of --models (JSON lines, from a forward "
                                      "pass on the CPU) and exit");
  app.add_flag("--no-torch", cuda.no_torch, "cuda: skip PyTorch's column");
  app.add_option("--python", cuda.python, "cuda: the Python that runs PyTorch")->capture_default_str();
  app.add_option("--torch-script", cuda.torch_script, "cuda: bench/torch_conv_layers.py")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) set_num_threads(threads);
  if (device == DeviceType::cuda && !app.count("--batch")) batches = {256};
  try {
    if (list) {
      for (int64_t b : batches) list_layers(cuda.models, b);
      return 0;
    }
    if (device == DeviceType::cuda) {
      cuda.dtype = dtype;
      cuda.repeat = timing.repeat;
      cuda.json = json;
      int status = 0;
      for (int64_t b : batches) {
        cuda.batch = b;
        status = std::max(status, bench::run_cuda_kernels(cuda));
        if (status == bench::kNoDevice) return status;
      }
      return status;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "kernels: {}\n", e.what());
    return 1;
  }
  if (dtype == DType::f16) {
    fmt::print(stderr, "kernels: --device cpu takes --dtype f32 or bf16\n");
    return 2;
  }

  const double ceiling = sgemm_ceiling(timing);
  std::vector<Row> rows{matmul_row(timing, "matmul", 2048, 2048, 2048, false)};

  // (C, K, H = W) of each distinct 3x3 stride-1 layer.
  const std::vector<std::array<int64_t, 3>> layers = square_3x3_layers(shapes == Shapes::vgg11 ? "vgg11_cifar"
                                                                                               : "resnet18_cifar");
  const DType conv_dtype = dtype;
  for (int64_t N : batches) {
    for (const auto& [C, K, HW] : layers)
      for (Row& r : conv_rows(timing, {N, C, K, HW, HW, conv_dtype})) rows.push_back(std::move(r));
    rows.push_back(matmul_row(timing, "linear", N, 512, 512, true));
    rows.push_back(matmul_row(timing, "linear", N, 512, 10, true));
  }

  json ? print_json(rows, ceiling) : print_table(rows, ceiling);
  return std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.ok(); }) ? 0 : 1;
}
