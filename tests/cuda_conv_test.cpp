// The CUDA table's convolutions (cuDNN, kernels/cuda/cudnn_conv.cpp) against the reference
// kernels on what tests/cuda_test.cpp's dense sweep leaves out: f64, views cuDNN cannot
// describe (slices, broadcasts, transposed filters, strided bias/db), a null db, f32 kept
// off TF32 in every direction, 1x1 convolutions as cuBLAS GEMMs, and the argument errors. Every operand lives in a buffer
// whose gaps hold a sentinel: the comparison covers the whole buffer, so a write outside
// the view fails too. Device cases are skipped without a GPU (tests/cuda_skip.h); the error
// case runs wherever CUDA is built, since the checks come before any CUDA call.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda/conv1x1_gemm.h"
#include "ringflow/kernels/cudnn_choices.h"
#include "ringflow/kernels/reference/strided.h"
#include "ringflow/kernels/cuda_copy.h"
#include "ringflow/tests/cuda_skip.h"

namespace ringflow {
namespace {

constexpr double kSentinel = 7.0;  // in every slot a view does not reach


View make_view(void* data, DType dtype, const Shape& shape, const Shape& strides) {
  View v;
  v.data = data;
  v.dtype = dtype;
  v.shape = shape;
  v.strides = strides;
  return v;
}

// How an activation (N, C, H, W) lies in its buffer.
enum class Act { nchw, nhwc, w_slice, c_slice, n_broadcast };
const char* act_name(Act a) {
  const char* names[] = {"nchw", "nhwc", "w_slice", "c_slice", "n_broadcast"};
  return names[static_cast<int>(a)];
}

Shape act_strides(const Shape& s, Act a) {
  const int64_t C = s[1], H = s[2], W = s[3];
  switch (a) {
    case Act::nchw: return contiguous_strides(s);
    case Act::nhwc: return {H * W * C, 1, W * C, C};
    case Act::w_slice: return {C * H * (W + 3), H * (W + 3), W + 3, 1};  // x[..., :W] of W+3
    case Act::c_slice: return {H * W * (C + 2), 1, W * (C + 2), C + 2};  // NHWC, 2 spare channels
    case Act::n_broadcast: return {0, H * W, W, 1};                      // one image, N times
  }
  return {};
}

// How a filter (K, C, R, S) lies in its buffer.
enum class Filt { kcrs, krsc, crsk };
const char* filt_name(Filt f) {
  const char* names[] = {"kcrs", "krsc", "crsk"};
  return names[static_cast<int>(f)];
}

Shape filt_strides(const Shape& s, Filt f) {
  const int64_t K = s[0], C = s[1], R = s[2], S = s[3];
  switch (f) {
    case Filt::kcrs: return contiguous_strides(s);
    case Filt::krsc: return {R * S * C, 1, S * C, C};
    case Filt::crsk: return {1, R * S * K, S * K, K};  // a (C, R, S, K) buffer seen as KCRS
  }
  return {};
}

// One operand in a host buffer and a device buffer of the same slots, seen through the same
// shape and strides. Inputs hold value(slot) everywhere; outputs the sentinel.
struct Operand {
  DType dtype;
  Shape shape, strides;
  int64_t slots = 1;  // max offset + 1
  std::vector<unsigned char> host;
  void* device = nullptr;

  Operand(DType dt, Shape shape_, Shape strides_, int seed)
      : dtype(dt), shape(std::move(shape_)), strides(std::move(strides_)) {
    for (size_t d = 0; d < shape.size(); ++d) slots += (shape[d] - 1) * strides[d];
    host.resize(slots * dtype_size(dt));
    std::vector<double> v(slots);
    // Multiples of 1/8 in [-1, 1]: exact in bf16, and every product and sum below is exact
    // in an f32 accumulator, so only the final rounding (and the algorithm) differs.
    for (int64_t i = 0; i < slots; ++i)
      v[i] = seed < 0 ? kSentinel : static_cast<double>((i * 7 + seed) % 17) / 8.0 - 1.0;
    reference_backend().copy(flat_host(), make_view(v.data(), DType::f64, {slots}, {1}));
    device = cuda_backend()->allocate(slots * dtype_size(dt));
    copy_between_devices(flat_device(), Device::cuda(), flat_host(), Device::cpu());
  }
  ~Operand() { cuda_backend()->deallocate(device, slots * dtype_size(dtype)); }
  Operand(const Operand&) = delete;
  Operand& operator=(const Operand&) = delete;

  View flat_host() { return make_view(host.data(), dtype, {slots}, {1}); }
  View flat_device() const { return make_view(device, dtype, {slots}, {1}); }
  View on_host() { return make_view(host.data(), dtype, shape, strides); }
  View on_device() const { return make_view(device, dtype, shape, strides); }

  // Every slot, both sides, in f64.
  std::vector<double> host_values() {
    std::vector<double> out(slots);
    reference_backend().copy(make_view(out.data(), DType::f64, {slots}, {1}), flat_host());
    return out;
  }
  std::vector<double> device_values() const {
    std::vector<unsigned char> raw(slots * dtype_size(dtype));
    const View h = make_view(raw.data(), dtype, {slots}, {1});
    copy_between_devices(h, Device::cpu(), flat_device(), Device::cuda());
    std::vector<double> out(slots);
    reference_backend().copy(make_view(out.data(), DType::f64, {slots}, {1}), h);
    return out;
  }
};

// Which slots the view reaches (the rest are gaps).
std::vector<bool> reached(const Operand& o) {
  std::vector<bool> mask(o.slots, false);
  int64_t numel = 1;
  for (int64_t n : o.shape) numel *= n;
  for (int64_t i = 0; i < numel; ++i) {
    int64_t rest = i, offset = 0;
    for (int d = static_cast<int>(o.shape.size()) - 1; d >= 0; --d) {
      offset += (rest % o.shape[d]) * o.strides[d];
      rest /= o.shape[d];
    }
    mask[offset] = true;
  }
  return mask;
}

// Largest |device - host| over the largest |host| in the slots the view reaches; the gaps
// must still hold the sentinel on the device (infinity otherwise).
double rel_error(Operand& out) {
  const std::vector<double> got = out.device_values(), want = out.host_values();
  const std::vector<bool> mask = reached(out);
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!mask[i]) {
      if (got[i] != kSentinel) return INFINITY;
      continue;
    }
    diff = std::max(diff, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

double tolerance(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-4;  // FFT / Winograd algorithms round inside
    case DType::f16: return 3e-3;
    default: return 2e-2;  // bf16: 8 bits
  }
}

struct Case {
  int64_t N, C, K, H, W, R, S;
  int64_t stride_h, stride_w, dilation_h, dilation_w, top, bottom, left, right;
  Act in;    // x and dy
  Act out;   // y and dx (never a broadcast)
  Filt w;    // w and dw
  int64_t bias_stride;  // 0: no bias and no db
};

const Case kCases[] = {
    // Everything 1.
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, Act::nchw, Act::nchw, Filt::kcrs, 1},
    // Asymmetric padding, channels-last in, NCHW out, channels-last filter.
    {2, 3, 5, 7, 6, 3, 3, 1, 1, 1, 1, 0, 1, 2, 0, Act::nhwc, Act::nchw, Filt::krsc, 1},
    // Slices in and out, a transposed filter, strided bias and db, unequal stride and dilation.
    {3, 4, 7, 11, 13, 3, 2, 2, 1, 1, 2, 1, 2, 0, 1, Act::w_slice, Act::c_slice, Filt::crsk, 2},
    // Broadcast batch in, stride 2 and dilation 2 with large asymmetric padding, no db.
    {2, 5, 3, 9, 7, 5, 3, 2, 2, 2, 2, 3, 4, 2, 2, Act::n_broadcast, Act::w_slice, Filt::kcrs, 0},
    // 1x1, stride 2, prime channel counts, channels-last throughout.
    {1, 17, 13, 5, 5, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, Act::nhwc, Act::nhwc, Filt::krsc, 1},
    // Padding only on one side, 7x1 filter, channel slice in.
    {2, 3, 4, 8, 7, 7, 1, 1, 1, 1, 1, 6, 0, 0, 0, Act::c_slice, Act::nchw, Filt::kcrs, 1},
};

}  // namespace

TEST_CASE("cuDNN conv on any strides and dtypes matches the reference, gaps untouched" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  const Backend& ref = reference_backend();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Case& c : kCases) {
      Conv2dParams p;
      p.stride_h = c.stride_h;
      p.stride_w = c.stride_w;
      p.dilation_h = c.dilation_h;
      p.dilation_w = c.dilation_w;
      p.pad_top = c.top;
      p.pad_bottom = c.bottom;
      p.pad_left = c.left;
      p.pad_right = c.right;
      const int64_t P = (c.H + c.top + c.bottom - c.dilation_h * (c.R - 1) - 1) / c.stride_h + 1;
      const int64_t Q = (c.W + c.left + c.right - c.dilation_w * (c.S - 1) - 1) / c.stride_w + 1;
      const Shape xs = {c.N, c.C, c.H, c.W}, ws = {c.K, c.C, c.R, c.S}, ys = {c.N, c.K, P, Q};
      const Act out = c.out;
      // Names as strings: CAPTURE printed a const char* as its address.
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(xs));
      CAPTURE(shape_str(ws));
      CAPTURE(shape_str({c.stride_h, c.stride_w, c.dilation_h, c.dilation_w, c.top, c.bottom,
                         c.left, c.right}));
      CAPTURE(std::string(act_name(c.in)));
      CAPTURE(std::string(act_name(out)));
      CAPTURE(std::string(filt_name(c.w)));

      // Inputs: x (N, C, H, W), w (K, C, R, S), bias (K), dy (N, K, P, Q).
      Operand x(dt, xs, act_strides(xs, c.in), 3), w(dt, ws, filt_strides(ws, c.w), 5);
      Operand dy(dt, ys, act_strides(ys, c.in), 11);
      Operand bias(dt, {c.K}, {std::max<int64_t>(c.bias_stride, 1)}, 1);
      // Outputs, sentinel everywhere: y, dx, dw, db.
      Operand y(dt, ys, act_strides(ys, out), -1), dx(dt, xs, act_strides(xs, out), -1);
      Operand dw(dt, ws, filt_strides(ws, c.w), -1);
      Operand db(dt, {c.K}, {std::max<int64_t>(c.bias_stride, 1)}, -1);
      const bool with_bias = c.bias_stride > 0;

      const View bias_h = bias.on_host(), bias_d = bias.on_device();
      ref.conv2d_forward(y.on_host(), x.on_host(), w.on_host(), with_bias ? &bias_h : nullptr, p);
      cuda.conv2d_forward(y.on_device(), x.on_device(), w.on_device(),
                          with_bias ? &bias_d : nullptr, p);
      CHECK(rel_error(y) <= tolerance(dt));

      ref.conv2d_backward_data(dx.on_host(), dy.on_host(), w.on_host(), p);
      cuda.conv2d_backward_data(dx.on_device(), dy.on_device(), w.on_device(), p);
      CHECK(rel_error(dx) <= tolerance(dt));

      const View db_h = db.on_host(), db_d = db.on_device();
      ref.conv2d_backward_weights(dw.on_host(), with_bias ? &db_h : nullptr, dy.on_host(),
                                  x.on_host(), p);
      cuda.conv2d_backward_weights(dw.on_device(), with_bias ? &db_d : nullptr, dy.on_device(),
                                   x.on_device(), p);
      CHECK(rel_error(dw) <= tolerance(dt));
      if (with_bias) CHECK(rel_error(db) <= tolerance(dt));
    }
  }
}

namespace {

// Restores allow_tf32 when a check throws.
struct Tf32Scope {
  bool saved = allow_tf32();
  explicit Tf32Scope(bool allow) { set_allow_tf32(allow); }
  ~Tf32Scope() { set_allow_tf32(saved); }
};

// Every slot of `o` within `tol` of `want`; the number that are not.
int64_t count_off(const Operand& o, double want, double tol) {
  int64_t bad = 0;
  for (double v : o.device_values()) bad += std::fabs(v - want) > tol;
  return bad;
}

}  // namespace

TEST_CASE("cuDNN f32 conv stays off TF32 unless allowed, in all three directions" *
          doctest::skip(kNoDevice)) {
  // a = 1 + 2^-13 needs 13 mantissa bits; TF32 keeps 10 and rounds it to 1. Each output sums
  // 64 products a * 1: 64 + 2^-7 in f32 (exact), 64 on TF32. 2^-9 leaves room for FFT rounding.
  const double a = 1.0 + std::ldexp(1.0, -13), exact = 64 * a, tol = std::ldexp(1.0, -9);
  const Backend& cuda = *cuda_backend();
  const DType f32 = DType::f32;
  const Shape xs = {1, 64, 8, 8}, ws = {64, 64, 1, 1};  // 1x1 conv: y (1, 64, 8, 8)
  const auto filled = [&](const Shape& s, double value) {
    auto o = std::make_unique<Operand>(f32, s, contiguous_strides(s), -1);
    cuda.fill(o->on_device(), value);
    return o;
  };
  Conv2dParams p;
  const auto run_all = [&](int64_t* bad) {
    // y = sum over 64 channels of a * 1.
    auto x = filled(xs, a), w = filled(ws, 1.0), y = filled(xs, 0.0);
    cuda.conv2d_forward(y->on_device(), x->on_device(), w->on_device(), nullptr, p);
    bad[0] = count_off(*y, exact, tol);
    // dx = sum over 64 filters of dy * 1.
    auto dy = filled(xs, a), dx = filled(xs, 0.0);
    cuda.conv2d_backward_data(dx->on_device(), dy->on_device(), w->on_device(), p);
    bad[1] = count_off(*dx, exact, tol);
    // dw = sum over 8 x 8 pixels of dy * 1.
    auto ones = filled(xs, 1.0), dw = filled(ws, 0.0);
    cuda.conv2d_backward_weights(dw->on_device(), nullptr, dy->on_device(), ones->on_device(), p);
    bad[2] = count_off(*dw, exact, tol);
  };
  int64_t bad[3];
  {
    Tf32Scope scope(false);
    run_all(bad);
    CHECK_MESSAGE(bad[0] == 0, "forward: " << bad[0] << " outputs not 64 + 2^-7");
    CHECK_MESSAGE(bad[1] == 0, "backward data: " << bad[1] << " outputs not 64 + 2^-7");
    CHECK_MESSAGE(bad[2] == 0, "backward weights: " << bad[2] << " outputs not 64 + 2^-7");
  }
  {
    // Allowed: either math is fine, so only closeness to 64 is checked.
    Tf32Scope scope(true);
    auto x = filled(xs, a), w = filled(ws, 1.0), y = filled(xs, 0.0);
    cuda.conv2d_forward(y->on_device(), x->on_device(), w->on_device(), nullptr, p);
    CHECK(count_off(*y, 64.0, std::ldexp(1.0, -6)) == 0);
  }
  // Off again: the algorithm measured with TF32 allowed must not be reused (the cache key).
  Tf32Scope scope(false);
  run_all(bad);
  CHECK(bad[0] + bad[1] + bad[2] == 0);
}

// What the search runs when the GEMM of a 1x1 convolution wins (Note [1x1 convolutions as
// GEMMs]), whichever candidate this GPU would choose: cuBLAS on conv1x1_matmul's views, NCHW's
// filter gradient on channels-last copies.
TEST_CASE("1x1 convolutions as cuBLAS GEMMs match the reference in both layouts" * doctest::skip(kNoDevice)) {
  using cuda::ConvDirection;
  const Backend& ref = reference_backend();
  const Conv2dParams p;
  const Shape xs = {3, 24, 5, 7}, ws = {40, 24, 1, 1}, ys = {3, 40, 5, 7};
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const Act layout : {Act::nchw, Act::nhwc}) {
      const bool nhwc = layout == Act::nhwc;
      for (const ConvDirection d :
           {ConvDirection::forward, ConvDirection::backward_data, ConvDirection::backward_filter}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(std::string(act_name(layout)));
        CAPTURE(static_cast<int>(d));
        const bool reads_x = d != ConvDirection::backward_data, reads_w = d != ConvDirection::backward_filter;
        Operand x(dt, xs, act_strides(xs, layout), reads_x ? 3 : -1);
        Operand w(dt, ws, filt_strides(ws, Filt::kcrs), reads_w ? 5 : -1);
        Operand y(dt, ys, act_strides(ys, layout), d == ConvDirection::forward ? -1 : 11);
        REQUIRE(cuda::conv1x1_gemm_route(d, x.on_device(), w.on_device(), y.on_device(), p, nhwc) !=
                cuda::Conv1x1Gemm::none);
        cuda::conv1x1_gemm(d, x.on_device(), w.on_device(), y.on_device(), p, nhwc, /*tf32=*/false);
        switch (d) {
          case ConvDirection::forward:
            ref.conv2d_forward(y.on_host(), x.on_host(), w.on_host(), nullptr, p);
            CHECK(rel_error(y) <= tolerance(dt));
            break;
          case ConvDirection::backward_data:
            ref.conv2d_backward_data(x.on_host(), y.on_host(), w.on_host(), p);
            CHECK(rel_error(x) <= tolerance(dt));
            break;
          case ConvDirection::backward_filter:
            ref.conv2d_backward_weights(w.on_host(), nullptr, y.on_host(), x.on_host(), p);
            CHECK(rel_error(w) <= tolerance(dt));
            break;
        }
      }
    }
  }
}

// The GEMM competes in the search itself: each direction's choice line names it, as the winner
// ("cublas gemm") or as the best of its source ("best gemm"), in both layouts.
TEST_CASE("the search of a 1x1 convolution times cuBLAS's GEMM beside cuDNN's candidates" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  const Conv2dParams p;
  const Shape xs = {2, 40, 3, 5}, ws = {24, 40, 1, 1}, ys = {2, 24, 3, 5};  // shapes no other case uses
  for (const Act layout : {Act::nchw, Act::nhwc}) {
    CAPTURE(std::string(act_name(layout)));
    Operand x(DType::f32, xs, act_strides(xs, layout), 3), w(DType::f32, ws, filt_strides(ws, Filt::kcrs), 5);
    Operand y(DType::f32, ys, act_strides(ys, layout), 11), dx(DType::f32, xs, act_strides(xs, layout), -1);
    Operand dw(DType::f32, ws, filt_strides(ws, Filt::kcrs), -1);
    cuda.conv2d_forward(y.on_device(), x.on_device(), w.on_device(), nullptr, p);
    cuda.conv2d_backward_data(dx.on_device(), y.on_device(), w.on_device(), p);
    cuda.conv2d_backward_weights(dw.on_device(), nullptr, y.on_device(), x.on_device(), p);
    const std::vector<std::string> lines = cudnn_conv_choices();
    if (lines.empty()) {
      MESSAGE("no cuDNN in this build: the direct kernels ran, no search");
      return;
    }
    for (const char* direction : {"forward", "backward-data", "backward-filter"}) {
      CAPTURE(std::string(direction));
      const std::string head = std::string(direction) + " f32 x " + shape_str(xs) +
                               (layout == Act::nhwc ? " nhwc" : " nchw") + " w " + shape_str(ws) + ":";
      int found = 0;
      for (const std::string& line : lines)
        if (line.rfind(head, 0) == 0) found += line.find("gemm") != std::string::npos ? 1 : 100;
      CHECK_MESSAGE(found == 1, "choice lines starting '" << head << "': " << found
                                                           << " (1: once, naming the GEMM)");
    }
  }
}

TEST_CASE("the 1x1 GEMM route keeps f32 off TF32 unless told, in every direction and layout" *
          doctest::skip(kNoDevice)) {
  using cuda::ConvDirection;
  // As the cuDNN case above: 64 products a * 1 with a = 1 + 2^-13 sum to 64 + 2^-7 in f32 and
  // to 64 on TF32. Two images of 4 x 8 pixels: the NCHW filter gradient takes the copies.
  const double a = 1.0 + std::ldexp(1.0, -13), exact = 64 * a;
  const Backend& cuda = *cuda_backend();
  const Shape xs = {2, 64, 4, 8}, ws = {64, 64, 1, 1};
  const Conv2dParams p;
  for (const bool tf32 : {false, true}) {
    for (const Act layout : {Act::nchw, Act::nhwc}) {
      for (const ConvDirection d :
           {ConvDirection::forward, ConvDirection::backward_data, ConvDirection::backward_filter}) {
        CAPTURE(tf32);
        CAPTURE(std::string(act_name(layout)));
        CAPTURE(static_cast<int>(d));
        Operand x(DType::f32, xs, act_strides(xs, layout), -1), y(DType::f32, xs, act_strides(xs, layout), -1);
        Operand w(DType::f32, ws, filt_strides(ws, Filt::kcrs), -1);
        // forward: y = sum over 64 channels of x (a) * w (1); backward-data: x = sum over 64
        // filters of y (a) * w (1); backward-filter: w = sum over 64 pixels of y (a) * x (1).
        Operand& out = d == ConvDirection::forward ? y : d == ConvDirection::backward_data ? x : w;
        cuda.fill(x.on_device(), d == ConvDirection::forward ? a : 1.0);
        cuda.fill(y.on_device(), a);
        cuda.fill(w.on_device(), 1.0);
        cuda.fill(out.on_device(), 0.0);
        cuda::conv1x1_gemm(d, x.on_device(), w.on_device(), y.on_device(), p, layout == Act::nhwc, tf32);
        const std::vector<double> got = out.device_values();
        // Allowed, either math is fine (cuBLAS may keep a shape on FMA kernels): near 64 only.
        const double want = tf32 ? 64.0 : exact, tol = tf32 ? std::ldexp(1.0, -6) : 0.0;
        int64_t bad = 0;
        for (double v : got) bad += std::fabs(v - want) > tol;
        CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " outputs not " << want);
      }
    }
  }
}

TEST_CASE("cuDNN conv argument errors throw std::invalid_argument naming the op and shapes") {
  const Backend* cuda = cuda_backend();
  if (!cuda) {
    MESSAGE("built without CUDA");
    return;
  }
  // The checks come before any CUDA call: these views point nowhere and run without a GPU.
  const auto v = [](DType dt, const Shape& s) {
    return make_view(nullptr, dt, s, contiguous_strides(s));
  };
  const DType f = DType::f32;
  const Conv2dParams p;  // stride 1, no padding: y (2, 4, 3, 3) from x (2, 3, 5, 5), w 3x3
  const View x = v(f, {2, 3, 5, 5}), w = v(f, {4, 3, 3, 3}), y = v(f, {2, 4, 3, 3});
  const View w_bad_c = v(f, {4, 2, 3, 3}), y_bad_hw = v(f, {2, 4, 4, 3}), y_bad_k = v(f, {2, 5, 3, 3});
  const View x3 = v(f, {3, 5, 5});

  CHECK_THROWS_WITH_AS(cuda->conv2d_forward(y, x, w_bad_c, nullptr, p),
                       doctest::Contains("conv2d_forward"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->conv2d_forward(y, x, w_bad_c, nullptr, p),
                       doctest::Contains("(4, 2, 3, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->conv2d_forward(y_bad_hw, x, w, nullptr, p),
                       doctest::Contains("(2, 4, 4, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->conv2d_forward(y_bad_k, x, w, nullptr, p),
                       doctest::Contains("conv2d_forward"), std::invalid_argument);
  CHECK_THROWS_AS(cuda->conv2d_forward(y, x3, w, nullptr, p), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->conv2d_backward_data(x, y_bad_hw, w, p),
                       doctest::Contains("conv2d_backward_data"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->conv2d_backward_weights(w_bad_c, nullptr, y, x, p),
                       doctest::Contains("conv2d_backward_weights"), std::invalid_argument);

  // dtypes: integers have no cuDNN convolution; mixed float types are not converted.
  const View xi = v(DType::i32, {2, 3, 5, 5}), wi = v(DType::i32, {4, 3, 3, 3});
  const View yi = v(DType::i32, {2, 4, 3, 3}), wh = v(DType::f16, {4, 3, 3, 3});
  CHECK_THROWS_WITH_AS(cuda->conv2d_forward(yi, xi, wi, nullptr, p), doctest::Contains("i32"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->conv2d_forward(y, x, wh, nullptr, p), doctest::Contains("f16"),
                       std::invalid_argument);
  CHECK_THROWS_AS(cuda->conv2d_backward_data(x, y, wh, p), std::invalid_argument);
  CHECK_THROWS_AS(cuda->conv2d_backward_weights(wi, nullptr, yi, xi, p), std::invalid_argument);
}

TEST_CASE("cuDNN conv: an input without elements whose output has some is refused, naming both" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  // No input channels: x and w hold nothing, y (2, 4, 3, 3) does (the bias alone, in principle).
  Operand y(DType::f32, {2, 4, 3, 3}, act_strides({2, 4, 3, 3}, Act::nchw), 1);
  const View x = make_view(y.device, DType::f32, {2, 0, 3, 3}, {0, 9, 3, 1});
  const View w = make_view(y.device, DType::f32, {4, 0, 3, 3}, {0, 9, 3, 1});
  {
    Operand x1(DType::f32, {1, 1, 3, 3}, act_strides({1, 1, 3, 3}, Act::nchw), 2);
    Operand w1(DType::f32, {1, 1, 3, 3}, filt_strides({1, 1, 3, 3}, Filt::kcrs), 3);
    Operand y1(DType::f32, {1, 1, 3, 3}, act_strides({1, 1, 3, 3}, Act::nchw), -1);
    cuda.conv2d_forward(y1.on_device(), x1.on_device(), w1.on_device(), nullptr, p);
  }
  if (cudnn_conv_choices().empty()) {
    MESSAGE("no cuDNN in this build: the direct kernels run, and take no such case to cuDNN");
    return;
  }
  CHECK_THROWS_WITH_AS(cuda.conv2d_forward(y.on_device(), x, w, nullptr, p),
                       doctest::Contains("x (2, 0, 3, 3) has no elements but the output (2, 4, 3, 3)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda.conv2d_backward_weights(w, nullptr, y.on_device(), x, p),
                       doctest::Contains("has no elements"), std::invalid_argument);
}

}  // namespace ringflow
