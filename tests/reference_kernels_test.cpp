// The reference kernels against PyTorch: every case in tests/fixtures/ops.safetensors
// (written by make_op_fixtures.py) is run in f64 in three memory layouts -- contiguous,
// channels-last (4-D tensors) and "padded" (every dim's stride skips elements) -- and
// compared within 1e-10. Exact cases cover the f16/bf16 rounding and the integer paths.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/tests/safetensors_reader.h"

namespace {

using namespace ringflow;
using ringflow::testing::SafetensorsFile;
using ringflow::testing::StoredTensor;
using json = nlohmann::json;

constexpr double kTolerance = 1e-10;  // |got - want| <= kTolerance * max(1, |want|)

const Backend& ref() { return reference_backend(); }

// ---- host tensors in a chosen layout

enum class Layout { contiguous, channels_last, padded };
constexpr Layout kLayouts[] = {Layout::contiguous, Layout::channels_last, Layout::padded};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::channels_last: return "channels_last";
    case Layout::padded: return "padded";
  }
  return "?";
}

// Owns its memory; the View points into it (moves keep the buffer in place).
struct HostTensor {
  std::vector<unsigned char> mem;
  View view;
  HostTensor() = default;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
};

// Memory is filled with 0xFF bytes (NaN for floats, -1 for ints) so that an element a
// kernel forgets to write fails the comparison.
HostTensor make_tensor(DType dtype, const Shape& shape, Layout layout) {
  HostTensor t;
  t.view.dtype = dtype;
  t.view.shape = shape;
  const int nd = static_cast<int>(shape.size());
  t.view.strides.assign(nd, 0);
  int64_t span = 1;  // elements of memory
  if (layout == Layout::channels_last && nd == 4) {
    const int64_t C = shape[1], H = shape[2], W = shape[3];
    t.view.strides = {H * W * C, 1, W * C, C};
    span = shape[0] * H * W * C;
  } else {
    // padded: each dim laid out as if one longer, so no stride is dense.
    const int64_t extra = layout == Layout::padded ? 1 : 0;
    for (int d = nd - 1; d >= 0; --d) {
      t.view.strides[d] = span;
      span *= shape[d] + extra;
    }
  }
  t.mem.assign(std::max<int64_t>(span, 1) * dtype_size(dtype), 0xFF);
  t.view.data = t.mem.data();
  return t;
}

// Offset of the row-major linear index i in v (computed by division, independently of
// the kernels' own iterator).
int64_t offset_of(const View& v, int64_t i) {
  int64_t off = 0;
  for (int d = v.dim() - 1; d >= 0; --d) {
    off += (i % v.shape[d]) * v.strides[d];
    i /= v.shape[d];
  }
  return off;
}

double get(const View& v, int64_t i) {
  const int64_t off = offset_of(v, i);
  return visit_dtype(v.dtype, [&](auto t) -> double {
    using T = decltype(t);
    const T value = static_cast<const T*>(v.data)[off];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return static_cast<float>(value);
    } else {
      return static_cast<double>(value);
    }
  });
}

int64_t get_i64(const View& v, int64_t i) {
  const int64_t off = offset_of(v, i);
  if (v.dtype == DType::i64) return static_cast<const int64_t*>(v.data)[off];
  if (v.dtype == DType::i32) return static_cast<const int32_t*>(v.data)[off];
  return static_cast<int64_t>(get(v, i));
}

void set(const View& v, int64_t i, double value) {
  const int64_t off = offset_of(v, i);
  visit_dtype(v.dtype, [&](auto t) {
    using T = decltype(t);
    static_cast<T*>(v.data)[off] = static_cast<T>(value);
  });
}

void set_i64(const View& v, int64_t i, int64_t value) {
  const int64_t off = offset_of(v, i);
  if (v.dtype == DType::i64) static_cast<int64_t*>(v.data)[off] = value;
  else if (v.dtype == DType::i32) static_cast<int32_t*>(v.data)[off] = static_cast<int32_t>(value);
  else set(v, i, static_cast<double>(value));
}

// A tensor holding the given values (row-major) in the given dtype and layout.
HostTensor tensor_of(DType dtype, const Shape& shape, const std::vector<double>& values,
                     Layout layout = Layout::contiguous) {
  HostTensor t = make_tensor(dtype, shape, layout);
  REQUIRE(static_cast<int64_t>(values.size()) == t.view.numel());
  for (size_t i = 0; i < values.size(); ++i) set(t.view, static_cast<int64_t>(i), values[i]);
  return t;
}

// ---- the fixture file

struct Fixture {
  SafetensorsFile file;
  json cases;
  explicit Fixture(const std::string& path)
      : file(path), cases(json::parse(file.metadata().at("cases"))) {}
};

const Fixture& fixture() {
  static const Fixture f(std::string(RINGFLOW_SOURCE_DIR) + "/tests/fixtures/ops.safetensors");
  return f;
}

const StoredTensor& stored(const std::string& name) { return fixture().file.at(name); }

// Case names of one op, in file order.
std::vector<std::string> cases_of(const std::string& op) {
  std::vector<std::string> names;
  for (const auto& [name, c] : fixture().cases.items()) {
    if (c.at("op") == op) names.push_back(name);
  }
  return names;
}

// The stored tensor `name` copied into a fresh tensor of the given layout.
HostTensor load(const std::string& name, Layout layout, DType dtype = DType::f64) {
  const StoredTensor& s = stored(name);
  if (s.dtype == "I64") dtype = DType::i64;
  HostTensor t = make_tensor(dtype, Shape(s.shape.begin(), s.shape.end()), layout);
  for (int64_t i = 0; i < s.numel(); ++i) {
    if (dtype == DType::i64) set_i64(t.view, i, s.i64(i));
    else set(t.view, i, s.f64(i));
  }
  return t;
}

// An output tensor shaped like the stored tensor `name`.
HostTensor empty_like(const std::string& name, Layout layout) {
  const StoredTensor& s = stored(name);
  return make_tensor(s.dtype == "I64" ? DType::i64 : DType::f64,
                     Shape(s.shape.begin(), s.shape.end()), layout);
}

// v broadcast to `shape` (NumPy rules, right-aligned): stride 0 in new and size-1 dims.
View broadcast_to(const View& v, const Shape& shape) {
  View b = v;
  b.shape = shape;
  b.strides.assign(shape.size(), 0);
  const size_t lead = shape.size() - v.shape.size();
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] != 1) {
      REQUIRE(v.shape[d] == shape[lead + d]);
      b.strides[lead + d] = v.strides[d];
    }
  }
  return b;
}

std::string format_double(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// Compares got with the stored tensor `name`; prints the first mismatches.
void check_matches(const View& got, const std::string& name, Layout layout) {
  const StoredTensor& want = stored(name);
  INFO(name, " in layout ", std::string(layout_name(layout)));
  REQUIRE(got.shape == Shape(want.shape.begin(), want.shape.end()));
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < want.numel(); ++i) {
    bool ok;
    std::string g, w;
    if (want.dtype == "I64") {
      ok = get_i64(got, i) == want.i64(i);
      g = std::to_string(get_i64(got, i));
      w = std::to_string(want.i64(i));
    } else {
      const double a = get(got, i), b = want.f64(i);
      ok = std::fabs(a - b) <= kTolerance * std::max(1.0, std::fabs(b));
      g = format_double(a);
      w = format_double(b);
    }
    if (!ok && bad++ < 5) first << "  [" << i << "] got " << g << " want " << w << "\n";
  }
  INFO("first mismatches:\n", first.str());
  CHECK_MESSAGE(bad == 0, bad, " of ", want.numel(), " elements differ");
}

Conv2dParams conv_params(const json& c) {
  Conv2dParams p;
  p.stride_h = c["stride"][0];
  p.stride_w = c["stride"][1];
  p.pad_top = c["pad"][0];
  p.pad_bottom = c["pad"][1];
  p.pad_left = c["pad"][2];
  p.pad_right = c["pad"][3];
  p.dilation_h = c["dilation"][0];
  p.dilation_w = c["dilation"][1];
  return p;
}

Pool2dParams pool_params(const json& c) {
  Pool2dParams p;
  p.kernel_h = c["kernel"][0];
  p.kernel_w = c["kernel"][1];
  p.stride_h = c["stride"][0];
  p.stride_w = c["stride"][1];
  p.pad_h = c["pad"][0];
  p.pad_w = c["pad"][1];
  p.ceil_mode = c["ceil_mode"];
  p.count_include_pad = c.value("count_include_pad", true);
  return p;
}

}  // namespace

TEST_CASE("the fixture file is the expected format and every case is tested") {
  const auto& meta = fixture().file.metadata();
  CHECK(meta.at("format_version") == "1");
  MESSAGE("ops.safetensors: torch ", meta.at("torch_version"), ", seed ", meta.at("seed"));
  const std::vector<std::string> known = {
      "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm_train",
      "batch_norm_eval", "softmax", "matmul", "gather", "scatter_add", "reduce", "binary",
      "where"};
  for (const auto& [name, c] : fixture().cases.items()) {
    INFO("case ", name);
    CHECK(std::find(known.begin(), known.end(), c.at("op").get<std::string>()) != known.end());
  }
}

TEST_CASE("the reference table has every kernel") {
  const Backend& b = ref();
  CHECK(std::string(b.name) == "reference");
  const void* entries[] = {
      reinterpret_cast<const void*>(b.allocate), reinterpret_cast<const void*>(b.deallocate),
      reinterpret_cast<const void*>(b.copy), reinterpret_cast<const void*>(b.fill),
      reinterpret_cast<const void*>(b.unary), reinterpret_cast<const void*>(b.binary),
      reinterpret_cast<const void*>(b.where), reinterpret_cast<const void*>(b.reduce),
      reinterpret_cast<const void*>(b.matmul), reinterpret_cast<const void*>(b.gather),
      reinterpret_cast<const void*>(b.scatter_add),
      reinterpret_cast<const void*>(b.conv2d_forward),
      reinterpret_cast<const void*>(b.conv2d_backward_data),
      reinterpret_cast<const void*>(b.conv2d_backward_weights),
      reinterpret_cast<const void*>(b.max_pool2d_forward),
      reinterpret_cast<const void*>(b.max_pool2d_backward),
      reinterpret_cast<const void*>(b.avg_pool2d_forward),
      reinterpret_cast<const void*>(b.avg_pool2d_backward),
      reinterpret_cast<const void*>(b.adaptive_avg_pool2d_forward),
      reinterpret_cast<const void*>(b.adaptive_avg_pool2d_backward),
      reinterpret_cast<const void*>(b.batch_norm_forward_train),
      reinterpret_cast<const void*>(b.batch_norm_forward_eval),
      reinterpret_cast<const void*>(b.batch_norm_backward),
      reinterpret_cast<const void*>(b.softmax_forward),
      reinterpret_cast<const void*>(b.softmax_backward)};
  for (const void* e : entries) CHECK(e != nullptr);
}

// ---- PyTorch fixtures, f64, every layout

TEST_CASE("conv2d forward, backward data and weights match torch") {
  const auto names = cases_of("conv2d");
  REQUIRE(names.size() >= 7);
  for (const std::string& n : names) {
    const json& c = fixture().cases.at(n);
    const Conv2dParams p = conv_params(c);
    const bool bias = c["bias"];
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), w = load(n + ".w", l), g = load(n + ".g", l);
      HostTensor b = bias ? load(n + ".b", l) : HostTensor{};
      HostTensor y = empty_like(n + ".y", l);
      ref().conv2d_forward(y.view, x.view, w.view, bias ? &b.view : nullptr, p);
      check_matches(y.view, n + ".y", l);

      HostTensor dx = empty_like(n + ".dx", l);
      ref().conv2d_backward_data(dx.view, g.view, w.view, p);
      check_matches(dx.view, n + ".dx", l);

      HostTensor dw = empty_like(n + ".dw", l);
      HostTensor db = bias ? empty_like(n + ".db", l) : HostTensor{};
      ref().conv2d_backward_weights(dw.view, bias ? &db.view : nullptr, g.view, x.view, p);
      check_matches(dw.view, n + ".dw", l);
      if (bias) check_matches(db.view, n + ".db", l);
    }
  }
}

TEST_CASE("max_pool2d forward and backward match torch (ceil_mode, padding, ties)") {
  const auto names = cases_of("max_pool2d");
  REQUIRE(names.size() >= 5);
  for (const std::string& n : names) {
    const Pool2dParams p = pool_params(fixture().cases.at(n));
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), g = load(n + ".g", l);
      HostTensor y = empty_like(n + ".y", l), dx = empty_like(n + ".dx", l);
      const Workspace ws = ref().max_pool2d_forward(y.view, x.view, p);
      check_matches(y.view, n + ".y", l);
      ref().max_pool2d_backward(dx.view, g.view, x.view, ws, p);
      check_matches(dx.view, n + ".dx", l);
    }
  }
}

TEST_CASE("avg_pool2d forward and backward match torch (count_include_pad, ceil_mode)") {
  const auto names = cases_of("avg_pool2d");
  REQUIRE(names.size() >= 5);
  for (const std::string& n : names) {
    const Pool2dParams p = pool_params(fixture().cases.at(n));
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), g = load(n + ".g", l);
      HostTensor y = empty_like(n + ".y", l), dx = empty_like(n + ".dx", l);
      ref().avg_pool2d_forward(y.view, x.view, p);
      check_matches(y.view, n + ".y", l);
      ref().avg_pool2d_backward(dx.view, g.view, p);
      check_matches(dx.view, n + ".dx", l);
    }
  }
}

TEST_CASE("adaptive_avg_pool2d forward and backward match torch") {
  const auto names = cases_of("adaptive_avg_pool2d");
  REQUIRE(names.size() >= 3);
  for (const std::string& n : names) {
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), g = load(n + ".g", l);
      HostTensor y = empty_like(n + ".y", l), dx = empty_like(n + ".dx", l);
      ref().adaptive_avg_pool2d_forward(y.view, x.view);
      check_matches(y.view, n + ".y", l);
      ref().adaptive_avg_pool2d_backward(dx.view, g.view);
      check_matches(dx.view, n + ".dx", l);
    }
  }
}

TEST_CASE("batch_norm train (batch stats, biased var, gradients) and eval match torch") {
  const auto train = cases_of("batch_norm_train");
  REQUIRE(train.size() >= 2);
  for (const std::string& n : train) {
    const double eps = fixture().cases.at(n)["eps"];
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), gamma = load(n + ".gamma", l);
      HostTensor beta = load(n + ".beta", l), g = load(n + ".g", l);
      HostTensor y = empty_like(n + ".y", l), mean = empty_like(n + ".mean", l);
      HostTensor var = empty_like(n + ".var", l);
      ref().batch_norm_forward_train(y.view, mean.view, var.view, x.view, &gamma.view,
                                     &beta.view, eps);
      check_matches(y.view, n + ".y", l);
      check_matches(mean.view, n + ".mean", l);
      check_matches(var.view, n + ".var", l);

      HostTensor dx = empty_like(n + ".dx", l), dgamma = empty_like(n + ".dgamma", l);
      HostTensor dbeta = empty_like(n + ".dbeta", l);
      ref().batch_norm_backward(dx.view, &dgamma.view, &dbeta.view, g.view, x.view, mean.view,
                                var.view, &gamma.view, eps);
      check_matches(dx.view, n + ".dx", l);
      check_matches(dgamma.view, n + ".dgamma", l);
      check_matches(dbeta.view, n + ".dbeta", l);
    }
  }
  const auto eval = cases_of("batch_norm_eval");
  REQUIRE(eval.size() >= 2);
  for (const std::string& n : eval) {
    const double eps = fixture().cases.at(n)["eps"];
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), gamma = load(n + ".gamma", l);
      HostTensor beta = load(n + ".beta", l), mean = load(n + ".mean", l);
      HostTensor var = load(n + ".var", l), y = empty_like(n + ".y", l);
      ref().batch_norm_forward_eval(y.view, x.view, mean.view, var.view, &gamma.view,
                                    &beta.view, eps);
      check_matches(y.view, n + ".y", l);
    }
  }
}

TEST_CASE("softmax and log_softmax forward and backward match torch along every dim") {
  const auto names = cases_of("softmax");
  REQUIRE(names.size() >= 6);
  for (const std::string& n : names) {
    const json& c = fixture().cases.at(n);
    const int64_t dim = c["dim"];
    const bool log = c["log"];
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), g = load(n + ".g", l);
      HostTensor y = empty_like(n + ".y", l), dx = empty_like(n + ".dx", l);
      ref().softmax_forward(y.view, x.view, dim, log);
      check_matches(y.view, n + ".y", l);
      ref().softmax_backward(dx.view, g.view, y.view, dim, log);
      check_matches(dx.view, n + ".dx", l);
    }
  }
}

TEST_CASE("batched matmul with a broadcast operand matches torch") {
  const auto names = cases_of("matmul");
  REQUIRE(names.size() >= 2);
  for (const std::string& n : names) {
    for (Layout l : kLayouts) {
      HostTensor a = load(n + ".a", l), b = load(n + ".b", l), y = empty_like(n + ".y", l);
      const int64_t B = y.view.shape[0], M = y.view.shape[1], N = y.view.shape[2];
      const int64_t K = a.view.shape.back();
      ref().matmul(y.view, broadcast_to(a.view, {B, M, K}), broadcast_to(b.view, {B, K, N}));
      check_matches(y.view, n + ".y", l);
    }
  }
}

TEST_CASE("gather and scatter_add match torch") {
  for (Layout l : kLayouts) {
    for (const std::string& n : cases_of("gather")) {
      const int64_t dim = fixture().cases.at(n)["dim"];
      HostTensor x = load(n + ".x", l), index = load(n + ".index", l);
      HostTensor y = empty_like(n + ".y", l);
      ref().gather(y.view, x.view, dim, index.view);
      check_matches(y.view, n + ".y", l);
    }
    for (const std::string& n : cases_of("scatter_add")) {
      const int64_t dim = fixture().cases.at(n)["dim"];
      HostTensor out = load(n + ".x", l), index = load(n + ".index", l);
      HostTensor src = load(n + ".src", l);
      ref().scatter_add(out.view, dim, index.view, src.view);
      check_matches(out.view, n + ".y", l);
    }
  }
}

TEST_CASE("sum, mean, max, min, argmax (with ties) and unbiased var match torch") {
  const auto names = cases_of("reduce");
  REQUIRE(names.size() >= 10);
  const std::map<std::string, ReduceOp> ops = {{"sum", ReduceOp::sum},
                                               {"mean", ReduceOp::mean},
                                               {"max", ReduceOp::max},
                                               {"min", ReduceOp::min},
                                               {"argmax", ReduceOp::argmax}};
  for (const std::string& n : names) {
    const std::string op = fixture().cases.at(n)["reduce"];
    for (Layout l : kLayouts) {
      HostTensor x = load(n + ".x", l), y = empty_like(n + ".y", l);
      if (op != "var") {
        ref().reduce(ops.at(op), y.view, x.view);
        check_matches(y.view, n + ".y", l);
        continue;
      }
      // var = sum((x - mean)^2) / (count - 1), composed from kernels as the framework will.
      HostTensor mean = empty_like(n + ".y", l);
      ref().reduce(ReduceOp::mean, mean.view, x.view);
      HostTensor d = make_tensor(DType::f64, x.view.shape, l);
      ref().binary(BinaryOp::sub, d.view, x.view, broadcast_to(mean.view, x.view.shape));
      ref().binary(BinaryOp::mul, d.view, d.view, d.view);
      ref().reduce(ReduceOp::sum, y.view, d.view);
      HostTensor denom = make_tensor(DType::f64, {1}, l);
      ref().fill(denom.view, static_cast<double>(x.view.numel() / y.view.numel() - 1));
      ref().binary(BinaryOp::div, y.view, y.view, broadcast_to(denom.view, y.view.shape));
      check_matches(y.view, n + ".y", l);
    }
  }
}

TEST_CASE("pow, maximum and where with broadcast operands match torch") {
  for (Layout l : kLayouts) {
    for (const std::string& n : cases_of("binary")) {
      const std::string op = fixture().cases.at(n)["binary"];
      HostTensor a = load(n + ".a", l), b = load(n + ".b", l), y = empty_like(n + ".y", l);
      const BinaryOp bop = op == "pow" ? BinaryOp::pow : BinaryOp::maximum;
      ref().binary(bop, y.view, broadcast_to(a.view, y.view.shape),
                   broadcast_to(b.view, y.view.shape));
      check_matches(y.view, n + ".y", l);
    }
    for (const std::string& n : cases_of("where")) {
      HostTensor cond = load(n + ".cond", l), a = load(n + ".a", l), b = load(n + ".b", l);
      HostTensor y = empty_like(n + ".y", l);
      const Shape& s = y.view.shape;
      ref().where(y.view, broadcast_to(cond.view, s), broadcast_to(a.view, s),
                  broadcast_to(b.view, s));
      check_matches(y.view, n + ".y", l);
    }
  }
}

// ---- exact cases: rounding of the 16-bit floats, integer paths, NaN

// Values of v in row-major order, as doubles.
std::vector<double> values(const View& v) {
  std::vector<double> out(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i) out[i] = get(v, i);
  return out;
}

TEST_CASE("copy rounds to f16 and bf16 to nearest even, once") {
  const double inf = std::numeric_limits<double>::infinity();
  // f16: 11 significant bits; 1 + 2^-11 ties to 1, 1 + 3*2^-11 ties up to 1 + 2^-9;
  // 65520 is the first value that rounds to inf; 2^-24 the smallest subnormal.
  const std::vector<double> in16 = {1.0, -2.25, 65504.0, 65520.0, std::ldexp(1.0, -24),
                                    1 + std::ldexp(1.0, -11), 1 + 3 * std::ldexp(1.0, -11)};
  const std::vector<double> want16 = {1.0, -2.25, 65504.0, inf, std::ldexp(1.0, -24), 1.0,
                                      1 + std::ldexp(1.0, -9)};
  // bf16: 8 significant bits; ties to even, and just above a tie rounds up.
  const std::vector<double> in_bf = {1.0, -3.5, 1 + std::ldexp(1.0, -8),
                                     1 + 3 * std::ldexp(1.0, -8),
                                     1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)};
  const std::vector<double> want_bf = {1.0, -3.5, 1.0, 1 + std::ldexp(1.0, -6),
                                       1 + std::ldexp(1.0, -7)};
  for (Layout l : {Layout::contiguous, Layout::padded}) {
    HostTensor src = tensor_of(DType::f64, {7}, in16, l);
    HostTensor h = make_tensor(DType::f16, {7}, l);
    HostTensor back = make_tensor(DType::f32, {7}, l);
    ref().copy(h.view, src.view);
    ref().copy(back.view, h.view);
    CHECK(values(back.view) == want16);
    CHECK(values(h.view) == want16);

    HostTensor src_bf = tensor_of(DType::f64, {5}, in_bf, l);
    HostTensor bf = make_tensor(DType::bf16, {5}, l);
    ref().copy(bf.view, src_bf.view);
    CHECK(values(bf.view) == want_bf);

    // f16 -> bf16 -> f16 of a value both hold exactly.
    HostTensor h2 = tensor_of(DType::f16, {2}, {0.75, -96.0}, l);
    HostTensor bf2 = make_tensor(DType::bf16, {2}, l);
    ref().copy(bf2.view, h2.view);
    CHECK(values(bf2.view) == std::vector<double>{0.75, -96.0});
  }
}

TEST_CASE("binary ops on f16 and bf16 compute wide and round once") {
  // f16: 1 + 3*2^-11 is a tie between 1 + 2^-10 and 1 + 2^-9: even mantissa wins.
  HostTensor a = tensor_of(DType::f16, {3}, {1.0, 2048.0, 0.5});
  HostTensor b = tensor_of(DType::f16, {3}, {3 * std::ldexp(1.0, -11), 1.0, 0.25});
  HostTensor out = make_tensor(DType::f16, {3}, Layout::padded);
  ref().binary(BinaryOp::add, out.view, a.view, b.view);
  CHECK(values(out.view) == std::vector<double>{1 + std::ldexp(1.0, -9), 2048.0, 0.75});
  ref().binary(BinaryOp::lt, out.view, a.view, b.view);
  CHECK(values(out.view) == std::vector<double>{0.0, 0.0, 0.0});
  ref().binary(BinaryOp::gt, out.view, a.view, b.view);
  CHECK(values(out.view) == std::vector<double>{1.0, 1.0, 1.0});

  // bf16: 3 * (1 + 2^-7) = 3.0234375 ties between 3.015625 and 3.03125 -> 3.03125.
  HostTensor x = tensor_of(DType::bf16, {2}, {3.0, -2.0});
  HostTensor y = tensor_of(DType::bf16, {2}, {1 + std::ldexp(1.0, -7), 0.5});
  HostTensor z = make_tensor(DType::bf16, {2}, Layout::contiguous);
  ref().binary(BinaryOp::mul, z.view, x.view, y.view);
  CHECK(values(z.view) == std::vector<double>{3.03125, -1.0});
  ref().binary(BinaryOp::relu_backward, z.view, x.view, y.view);
  CHECK(values(z.view) == std::vector<double>{3.0, -2.0});

  // f16 sum accumulates in double: 2048 + 1 + 1 = 2050 (an f16 accumulator would stay 2048).
  HostTensor s = tensor_of(DType::f16, {3}, {2048.0, 1.0, 1.0});
  HostTensor total = make_tensor(DType::f16, {1}, Layout::contiguous);
  ref().reduce(ReduceOp::sum, total.view, s.view);
  CHECK(values(total.view) == std::vector<double>{2050.0});
}

TEST_CASE("integer paths stay exact in int64") {
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable in a double
  HostTensor a = make_tensor(DType::i64, {2}, Layout::padded);
  set_i64(a.view, 0, big);
  set_i64(a.view, 1, -7);
  HostTensor c = make_tensor(DType::i64, {2}, Layout::contiguous);
  ref().copy(c.view, a.view);
  CHECK(get_i64(c.view, 0) == big);
  ref().binary(BinaryOp::add, c.view, a.view, a.view);
  CHECK(get_i64(c.view, 0) == 2 * big);
  CHECK(get_i64(c.view, 1) == -14);
  HostTensor two = tensor_of(DType::i64, {1}, {2});
  ref().binary(BinaryOp::div, c.view, a.view, broadcast_to(two.view, {2}));
  CHECK(get_i64(c.view, 1) == -3);  // truncation toward zero
  ref().unary(UnaryOp::abs, c.view, a.view);
  CHECK(get_i64(c.view, 1) == 7);

  // i32 argmax with ties: the first maximum; sum, max over dim 1 of (2, 4).
  HostTensor m = tensor_of(DType::i32, {2, 4}, {1, 5, 5, 2, -3, -1, -1, -2}, Layout::padded);
  HostTensor arg = make_tensor(DType::i64, {2, 1}, Layout::contiguous);
  ref().reduce(ReduceOp::argmax, arg.view, m.view);
  CHECK(get_i64(arg.view, 0) == 1);
  CHECK(get_i64(arg.view, 1) == 1);
  HostTensor r = make_tensor(DType::i32, {2, 1}, Layout::contiguous);
  ref().reduce(ReduceOp::sum, r.view, m.view);
  CHECK(values(r.view) == std::vector<double>{13, -7});
  ref().reduce(ReduceOp::min, r.view, m.view);
  CHECK(values(r.view) == std::vector<double>{1, -3});

  // i64 matmul (1, 2, 3) @ (1, 3, 2), and eq producing 1/0 in i64.
  HostTensor ma = tensor_of(DType::i64, {1, 2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor mb = tensor_of(DType::i64, {1, 3, 2}, {7, 8, 9, 10, 11, 12}, Layout::padded);
  HostTensor mc = make_tensor(DType::i64, {1, 2, 2}, Layout::padded);
  ref().matmul(mc.view, ma.view, mb.view);
  CHECK(values(mc.view) == std::vector<double>{58, 64, 139, 154});
  HostTensor eq = make_tensor(DType::i64, {1, 2, 2}, Layout::contiguous);
  HostTensor k = tensor_of(DType::i64, {1, 2, 2}, {58, 0, 139, 0});
  ref().binary(BinaryOp::eq, eq.view, mc.view, k.view);
  CHECK(values(eq.view) == std::vector<double>{1, 0, 1, 0});

  // where with an i64 condition; gather and scatter_add (duplicate indices) on i32.
  HostTensor cond = tensor_of(DType::i64, {3}, {0, 3, -1});
  HostTensor wa = tensor_of(DType::i32, {3}, {1, 2, 3}), wb = tensor_of(DType::i32, {3}, {7, 8, 9});
  HostTensor w = make_tensor(DType::i32, {3}, Layout::padded);
  ref().where(w.view, cond.view, wa.view, wb.view);
  CHECK(values(w.view) == std::vector<double>{7, 2, 3});
  HostTensor idx = tensor_of(DType::i64, {1, 4}, {2, 0, 2, 2});
  HostTensor src = tensor_of(DType::i32, {1, 4}, {1, 10, 100, 1000});
  HostTensor acc = tensor_of(DType::i32, {1, 3}, {5, 5, 5});
  ref().scatter_add(acc.view, 1, idx.view, src.view);
  CHECK(values(acc.view) == std::vector<double>{15, 5, 1106});
  HostTensor gathered = make_tensor(DType::i32, {1, 4}, Layout::padded);
  ref().gather(gathered.view, acc.view, 1, idx.view);
  CHECK(values(gathered.view) == std::vector<double>{1106, 15, 1106, 1106});
}

TEST_CASE("NaN propagates through max, maximum and argmax as in PyTorch") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  HostTensor x = tensor_of(DType::f32, {1, 4}, {1.0, nan, 3.0, nan});
  HostTensor y = make_tensor(DType::f32, {1, 1}, Layout::contiguous);
  ref().reduce(ReduceOp::max, y.view, x.view);
  CHECK(std::isnan(get(y.view, 0)));
  ref().reduce(ReduceOp::min, y.view, x.view);
  CHECK(std::isnan(get(y.view, 0)));
  HostTensor arg = make_tensor(DType::i64, {1, 1}, Layout::contiguous);
  ref().reduce(ReduceOp::argmax, arg.view, x.view);
  CHECK(get_i64(arg.view, 0) == 1);  // the first NaN
  HostTensor ones = tensor_of(DType::f32, {1, 4}, {2.0, 2.0, 2.0, 2.0});
  HostTensor m = make_tensor(DType::f32, {1, 4}, Layout::padded);
  ref().binary(BinaryOp::maximum, m.view, x.view, ones.view);
  CHECK(get(m.view, 0) == 2.0);
  CHECK(std::isnan(get(m.view, 1)));
  CHECK(get(m.view, 2) == 3.0);
}

TEST_CASE("unary ops on f32 and the kernels reject what they cannot do") {
  HostTensor x = tensor_of(DType::f32, {4}, {-1.0, 0.0, 0.5, 2.0});
  HostTensor y = make_tensor(DType::f32, {4}, Layout::padded);
  ref().unary(UnaryOp::relu, y.view, x.view);
  CHECK(values(y.view) == std::vector<double>{0.0, 0.0, 0.5, 2.0});
  ref().unary(UnaryOp::sigmoid, y.view, x.view);
  CHECK(get(y.view, 1) == 0.5);
  CHECK(get(y.view, 3) == doctest::Approx(1.0 / (1.0 + std::exp(-2.0))).epsilon(1e-7));
  ref().unary(UnaryOp::tanh, y.view, x.view);
  CHECK(get(y.view, 0) == doctest::Approx(std::tanh(-1.0)).epsilon(1e-7));

  HostTensor i = tensor_of(DType::i32, {4}, {1, 2, 3, 4});
  HostTensor o = make_tensor(DType::i32, {4}, Layout::contiguous);
  CHECK_THROWS_AS(ref().unary(UnaryOp::exp, o.view, i.view), std::invalid_argument);
  HostTensor wrong = make_tensor(DType::f32, {3}, Layout::contiguous);
  CHECK_THROWS_AS(ref().binary(BinaryOp::add, wrong.view, x.view, x.view),
                  std::invalid_argument);
  HostTensor idx = tensor_of(DType::i64, {1}, {4});
  HostTensor g = make_tensor(DType::f32, {1}, Layout::contiguous);
  CHECK_THROWS_AS(ref().gather(g.view, x.view, 0, idx.view), std::invalid_argument);
}
