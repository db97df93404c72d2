// Kernel microbenchmarks: conv forward / backward-data / backward-weights at the VGG-11
// CIFAR-10 layer shapes and matmul (VGG-11 classifier and sgemm 2048^3), each through
// ringflow's cpu_backend() on Views (channels-last activations) and through raw oneDNN
// (primitive built once, same layouts). Every row is checked once (the two paths must
// agree) before it is timed; times are medians of --repeat runs after warm-up, and every
// GFLOP/s is also given as a percent of the machine ceiling measured in the same run
// (raw oneDNN sgemm 2048^3).
//
// Adding a path (e.g. the framework's op call) = one more `time_*` function per kernel
// and one more column in Row.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/backend.h"

namespace {

using namespace ringflow;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// ---------------------------------------------------------------- timing and buffers
struct Timing {
  int warmup = 3;
  int repeat = 10;
};

// Median wall time of fn in ms.
double median_ms(const Timing& t, const std::function<void()>& fn) {
  for (int i = 0; i < t.warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < t.repeat; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// An f32 host tensor: 64-byte aligned storage and a View on it.
struct Tensor {
  std::vector<float> mem;
  View v;
};

Tensor tensor(const Shape& shape, bool channels_last, std::mt19937& rng) {
  Tensor t;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  t.mem.resize(static_cast<size_t>(n));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : t.mem) x = u(rng);
  t.v.data = t.mem.data();
  t.v.dtype = DType::f32;
  t.v.shape = shape;
  t.v.strides.assign(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) t.v.strides[d] = t.v.strides[d + 1] * shape[d + 1];
  if (channels_last && shape.size() == 4) {
    const int64_t C = shape[1], H = shape[2], W = shape[3];
    t.v.strides = {H * W * C, 1, W * C, C};
  }
  return t;
}

// Largest |a - b| / (1 + |b|) over two buffers holding the same memory layout.
double max_rel_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i]))));
  return m;
}

// ---------------------------------------------------------------- rows
struct Row {
  std::string op, shape;
  double gflop = 0;
  double ringflow_ms = 0, raw_ms = 0;
  double check = 0;  // max relative difference between the two paths
};

struct ConvShape {
  int64_t N, C, K, H, W;  // 3x3, stride 1, pad 1
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

// ---------------------------------------------------------------- raw oneDNN paths
struct RawConv {
  dnnl::memory::desc x_md, y_md, w_user_md;
  dnnl::memory::dims strides{1, 1}, dil{0, 0}, pad{1, 1};
  dnnl::convolution_forward::primitive_desc fwd_pd;
  explicit RawConv(const ConvShape& s)
      : x_md({s.N, s.C, s.H, s.W}, dt::f32, tag::nhwc),
        y_md({s.N, s.K, s.H, s.W}, dt::f32, tag::nhwc),
        w_user_md({s.K, s.C, 3, 3}, dt::f32, tag::oihw) {
    dnnl::memory::desc w_any({s.K, s.C, 3, 3}, dt::f32, tag::any);
    dnnl::memory::desc b_md({s.K}, dt::f32, tag::a);
    fwd_pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        x_md, w_any, b_md, y_md, strides, dil, pad, pad),
        engine());
  }
};

// Reorders user weights into `want` once; returns the memory to run with.
dnnl::memory weights_for(const dnnl::memory::desc& want, const dnnl::memory::desc& user_md, void* data) {
  dnnl::memory user(user_md, engine(), data);
  if (want == user_md) return user;
  dnnl::memory m(want, engine());
  dnnl::reorder(user, m).execute(stream(), user, m);
  return m;
}

double raw_conv_fwd(const Timing& t, const ConvShape& s, Tensor& x, Tensor& w, Tensor& b, Tensor& y) {
  RawConv rc(s);
  dnnl::convolution_forward prim(rc.fwd_pd);
  dnnl::memory wm = weights_for(rc.fwd_pd.weights_desc(), rc.w_user_md, w.v.data);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(rc.x_md, engine(), x.v.data)},
                                             {DNNL_ARG_WEIGHTS, wm},
                                             {DNNL_ARG_BIAS, dnnl::memory(rc.fwd_pd.bias_desc(), engine(), b.v.data)},
                                             {DNNL_ARG_DST, dnnl::memory(rc.y_md, engine(), y.v.data)}};
  return median_ms(t, [&] { prim.execute(stream(), args); });
}

double raw_conv_bwd_data(const Timing& t, const ConvShape& s, Tensor& dx, Tensor& w, Tensor& dy) {
  RawConv rc(s);
  dnnl::memory::desc w_any({s.K, s.C, 3, 3}, dt::f32, tag::any);
  dnnl::convolution_backward_data::primitive_desc pd(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, rc.x_md, w_any, rc.y_md,
                                            rc.strides, rc.dil, rc.pad, rc.pad),
      engine(), rc.fwd_pd);
  dnnl::convolution_backward_data prim(pd);
  dnnl::memory wm = weights_for(pd.weights_desc(), rc.w_user_md, w.v.data);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DIFF_DST, dnnl::memory(rc.y_md, engine(), dy.v.data)},
                                             {DNNL_ARG_WEIGHTS, wm},
                                             {DNNL_ARG_DIFF_SRC, dnnl::memory(rc.x_md, engine(), dx.v.data)}};
  return median_ms(t, [&] { prim.execute(stream(), args); });
}

// dw in plain OIHW at the end, as ringflow delivers it (reorder included when needed).
double raw_conv_bwd_weights(const Timing& t, const ConvShape& s, Tensor& dw, Tensor& db, Tensor& dy, Tensor& x) {
  RawConv rc(s);
  dnnl::memory::desc w_any({s.K, s.C, 3, 3}, dt::f32, tag::any);
  dnnl::memory::desc b_md({s.K}, dt::f32, tag::a);
  dnnl::convolution_backward_weights::primitive_desc pd(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, rc.x_md, w_any, b_md,
                                               rc.y_md, rc.strides, rc.dil, rc.pad, rc.pad),
      engine(), rc.fwd_pd);
  dnnl::convolution_backward_weights prim(pd);
  dnnl::memory user(rc.w_user_md, engine(), dw.v.data);
  const bool reorder = pd.diff_weights_desc() != rc.w_user_md;
  dnnl::memory dwm = reorder ? dnnl::memory(pd.diff_weights_desc(), engine()) : user;
  dnnl::reorder to_user = reorder ? dnnl::reorder(dwm, user) : dnnl::reorder();
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(rc.x_md, engine(), x.v.data)},
                                             {DNNL_ARG_DIFF_DST, dnnl::memory(rc.y_md, engine(), dy.v.data)},
                                             {DNNL_ARG_DIFF_WEIGHTS, dwm},
                                             {DNNL_ARG_DIFF_BIAS, dnnl::memory(b_md, engine(), db.v.data)}};
  return median_ms(t, [&] {
    prim.execute(stream(), args);
    if (reorder) to_user.execute(stream(), dwm, user);
  });
}

// out (M, N) = a (M, K) @ b (K, N), b given as its transpose (N, K) when b_t.
double raw_matmul(const Timing& t, int64_t M, int64_t K, int64_t N, bool b_t, Tensor& a, Tensor& b, Tensor& out) {
  dnnl::memory::desc a_md({M, K}, dt::f32, tag::ab), o_md({M, N}, dt::f32, tag::ab);
  dnnl::memory::desc b_md({K, N}, dt::f32, b_t ? tag::ba : tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, o_md), engine());
  dnnl::matmul prim(pd);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(a_md, engine(), a.v.data)},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, engine(), b.v.data)},
                                             {DNNL_ARG_DST, dnnl::memory(o_md, engine(), out.v.data)}};
  return median_ms(t, [&] { prim.execute(stream(), args); });
}

// ---------------------------------------------------------------- ringflow paths
Conv2dParams vgg_params() {
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  return p;
}

double ringflow_conv_fwd(const Timing& t, Tensor& x, Tensor& w, Tensor& b, Tensor& y) {
  const Backend& be = cpu_backend();
  const Conv2dParams p = vgg_params();
  return median_ms(t, [&] { be.conv2d_forward(y.v, x.v, w.v, &b.v, p); });
}

double ringflow_conv_bwd_data(const Timing& t, Tensor& dx, Tensor& w, Tensor& dy) {
  const Backend& be = cpu_backend();
  const Conv2dParams p = vgg_params();
  return median_ms(t, [&] { be.conv2d_backward_data(dx.v, dy.v, w.v, p); });
}

double ringflow_conv_bwd_weights(const Timing& t, Tensor& dw, Tensor& db, Tensor& dy, Tensor& x) {
  const Backend& be = cpu_backend();
  const Conv2dParams p = vgg_params();
  return median_ms(t, [&] { be.conv2d_backward_weights(dw.v, &db.v, dy.v, x.v, p); });
}

double ringflow_matmul(const Timing& t, Tensor& a, Tensor& b, Tensor& out) {
  const Backend& be = cpu_backend();
  return median_ms(t, [&] { be.matmul(out.v, a.v, b.v); });
}

// ---------------------------------------------------------------- rows per kernel
// Weights get a storage identity so ringflow's weight cache applies, as in training.
// The identity must be unique for the process: a freed buffer's address comes back for
// the next layer's weights, and (address, version) alone would then hit stale weights.
void set_identity(Tensor& w) {
  static char ids[4096];
  static int next = 0;
  w.v.storage_id = &ids[next++ % 4096];
  w.v.version = 1;
}

std::vector<Row> conv_rows(const Timing& t, const ConvShape& s) {
  std::mt19937 rng(42);
  const std::string shape = fmt::format("N{} {}->{} {}x{} 3x3", s.N, s.C, s.K, s.H, s.W);
  const double gflop = 2.0 * s.N * s.K * s.H * s.W * s.C * 9 / 1e9;
  Tensor x = tensor({s.N, s.C, s.H, s.W}, true, rng), w = tensor({s.K, s.C, 3, 3}, false, rng);
  Tensor b = tensor({s.K}, false, rng), dy = tensor({s.N, s.K, s.H, s.W}, true, rng);
  set_identity(w);
  Tensor y1 = tensor({s.N, s.K, s.H, s.W}, true, rng), y2 = y1;
  y2.v.data = y2.mem.data();
  std::vector<Row> rows;

  Row fwd{"conv_fwd", shape, gflop};
  fwd.ringflow_ms = ringflow_conv_fwd(t, x, w, b, y1);
  fwd.raw_ms = raw_conv_fwd(t, s, x, w, b, y2);
  fwd.check = max_rel_diff(y1.mem.data(), y2.mem.data(), y1.mem.size());
  rows.push_back(fwd);

  Tensor dx1 = tensor({s.N, s.C, s.H, s.W}, true, rng), dx2 = dx1;
  dx2.v.data = dx2.mem.data();
  Row bwd_data{"conv_bwd_data", shape, gflop};
  bwd_data.ringflow_ms = ringflow_conv_bwd_data(t, dx1, w, dy);
  bwd_data.raw_ms = raw_conv_bwd_data(t, s, dx2, w, dy);
  bwd_data.check = max_rel_diff(dx1.mem.data(), dx2.mem.data(), dx1.mem.size());
  if (s.C >= 16) rows.push_back(bwd_data);  // the first layer needs no dx

  Tensor dw1 = tensor({s.K, s.C, 3, 3}, false, rng), dw2 = dw1, db1 = tensor({s.K}, false, rng), db2 = db1;
  dw2.v.data = dw2.mem.data();
  db2.v.data = db2.mem.data();
  Row bwd_w{"conv_bwd_weights", shape, gflop};
  bwd_w.ringflow_ms = ringflow_conv_bwd_weights(t, dw1, db1, dy, x);
  bwd_w.raw_ms = raw_conv_bwd_weights(t, s, dw2, db2, dy, x);
  bwd_w.check = std::max(max_rel_diff(dw1.mem.data(), dw2.mem.data(), dw1.mem.size()),
                         max_rel_diff(db1.mem.data(), db2.mem.data(), db1.mem.size()));
  rows.push_back(bwd_w);
  return rows;
}

// out (1, M, N) = a (1, M, K) @ b; b_t: b is the transpose of a contiguous (N, K) weight.
Row matmul_row(const Timing& t, const std::string& name, int64_t M, int64_t K, int64_t N, bool b_t) {
  std::mt19937 rng(7);
  Tensor a = tensor({1, M, K}, false, rng), b = tensor({1, K, N}, false, rng);
  if (b_t) b.v.strides = {K * N, 1, K};
  Tensor o1 = tensor({1, M, N}, false, rng), o2 = o1;
  o2.v.data = o2.mem.data();
  Row r{name, fmt::format("{}x{}x{}{}", M, K, N, b_t ? " b^T" : ""), 2.0 * M * K * N / 1e9};
  r.ringflow_ms = ringflow_matmul(t, a, b, o1);
  r.raw_ms = raw_matmul(t, M, K, N, b_t, a, b, o2);
  r.check = max_rel_diff(o1.mem.data(), o2.mem.data(), o1.mem.size());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringflow kernel benchmarks: cpu_backend() vs raw oneDNN"};
  int threads = 0;
  std::vector<int64_t> batches{64, 256};
  Timing timing;
  bool json = false;
  app.add_option("--threads", threads, "threads (default: all cores)");
  app.add_option("--batch", batches, "batch sizes for the conv and classifier rows")->expected(1, -1);
  app.add_option("--repeat", timing.repeat, "timed repeats per row (median reported)")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "print one JSON object per row");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) set_num_threads(threads);

  // Ceiling first: raw oneDNN sgemm 2048^3.
  std::vector<Row> rows;
  rows.push_back(matmul_row(timing, "sgemm", 2048, 2048, 2048, false));
  const double ceiling = rows[0].gflop / (rows[0].raw_ms / 1e3);

  const std::vector<std::array<int64_t, 3>> vgg = {{3, 64, 32},  {64, 128, 16}, {128, 256, 8}, {256, 256, 8},
                                                   {256, 512, 4}, {512, 512, 4}, {512, 512, 2}};
  for (int64_t N : batches) {
    for (auto& l : vgg) {
      for (Row& r : conv_rows(timing, {N, l[0], l[1], l[2], l[2]})) rows.push_back(r);
    }
    rows.push_back(matmul_row(timing, "linear", N, 512, 512, true));
    rows.push_back(matmul_row(timing, "linear", N, 512, 10, true));
  }

  int bad = 0;
  if (!json) {
    fmt::print("threads {}  ceiling (raw oneDNN sgemm 2048^3) {:.0f} GFLOP/s\n", num_threads(), ceiling);
    fmt::print("{:<17} {:<26} {:>10} {:>9} {:>10} {:>9} {:>7} {:>7} {:>9}\n", "op", "shape", "ringflow ms",
               "GFLOP/s", "oneDNN ms", "GFLOP/s", "%ceil", "rf/raw", "check");
  }
  for (const Row& r : rows) {
    const double g1 = r.gflop / (r.ringflow_ms / 1e3), g2 = r.gflop / (r.raw_ms / 1e3);
    const bool ok = r.check < 1e-3;
    bad += !ok;
    if (json) {
      nlohmann::json j{{"op", r.op},           {"shape", r.shape},       {"gflop", r.gflop},
                       {"threads", num_threads()}, {"ringflow_ms", r.ringflow_ms}, {"ringflow_gflops", g1},
                       {"raw_onednn_ms", r.raw_ms}, {"raw_onednn_gflops", g2}, {"ceiling_gflops", ceiling},
                       {"ringflow_pct_ceiling", 100 * g1 / ceiling}, {"ratio_ringflow_over_raw", r.ringflow_ms / r.raw_ms},
                       {"max_rel_diff", r.check}};
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("{:<17} {:<26} {:>10.3f} {:>9.1f} {:>10.3f} {:>9.1f} {:>6.0f}% {:>7.3f} {:>9.1e}{}\n", r.op, r.shape,
                 r.ringflow_ms, g1, r.raw_ms, g2, 100 * g1 / ceiling, r.ringflow_ms / r.raw_ms, r.check,
                 ok ? "" : "  MISMATCH");
    }
  }
  return bad ? 1 : 0;
}
