#include "ringflow/framework/nn/init.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"
#include "ringflow/kernels/backend.h"

namespace ringflow::nn::init {

namespace {

thread_local bool skip_init = false;

// Fills t with draw() per element in row-major order: straight into a contiguous f32/f64 CPU
// tensor (VGG-16's 138M weights), through an f64 copy otherwise.
template <class Draw>
Tensor& fill_with(Tensor& t, Draw&& draw) {
  if (skip_init) return t;
  NoGradGuard no_grad;
  if (t.device().is_cpu() && t.is_contiguous() && t.dtype() == DType::f32) {
    float* p = static_cast<float*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(draw());
  } else if (t.device().is_cpu() && t.is_contiguous() && t.dtype() == DType::f64) {
    double* p = static_cast<double*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = draw();
  } else {
    std::vector<double> v(t.numel());
    for (double& x : v) x = draw();
    t.copy_(from_vector(v, t.shape(), DType::f64, Device::cpu()));
  }
  t.storage()->bump_version();
  return t;
}

double fan_of(const Tensor& t, FanMode mode) {
  const Fans f = calculate_fans(t);
  return static_cast<double>(mode == FanMode::fan_in ? f.fan_in : f.fan_out);
}

// Fills t with draw(gen) per element, where draw consumes exactly kDraws numbers of the
// generator: the Generator is counter-based (random.h), so element i's numbers sit at counter
// c0 + kDraws * i + 1... and large tensors are filled by several threads, each from a copy of
// the generator set to its first element. The result equals the sequential fill, bit for bit,
// and the generator ends where the sequential fill would leave it.
template <int kDraws, class Draw>
Tensor& fill_counted(Tensor& t, Generator& gen, Draw&& draw) {
  if (skip_init) return t;
  const int64_t n = t.numel();
  const bool fast = t.device().is_cpu() && t.is_contiguous() &&
                    (t.dtype() == DType::f32 || t.dtype() == DType::f64);
  const int workers = static_cast<int>(std::clamp<int64_t>(n / (1 << 20), 1, num_threads()));
  if (!fast || workers == 1) return fill_with(t, [&] { return draw(gen); });
  NoGradGuard no_grad;
  const uint64_t c0 = gen.counter();
  void* base = t.raw_data();
  const bool f32 = t.dtype() == DType::f32;
  auto work = [&](int64_t begin, int64_t end) {
    Generator g(gen.seed());
    g.set_counter(c0 + static_cast<uint64_t>(kDraws) * begin);
    for (int64_t i = begin; i < end; ++i) {
      const double v = draw(g);
      if (f32) static_cast<float*>(base)[i] = static_cast<float>(v);
      else static_cast<double*>(base)[i] = v;
    }
  };
  std::vector<std::thread> threads;
  const int64_t chunk = (n + workers - 1) / workers;
  for (int w = 1; w < workers; ++w)
    threads.emplace_back(work, std::min(n, w * chunk), std::min(n, (w + 1) * chunk));
  work(0, std::min(n, chunk));
  for (auto& th : threads) th.join();
  gen.set_counter(c0 + static_cast<uint64_t>(kDraws) * n);
  t.storage()->bump_version();
  return t;
}

}  // namespace

Fans calculate_fans(const Tensor& t) {
  RF_CHECK(t.dim() >= 2, "init: fan in and fan out need a tensor of >= 2 dims, got ",
           shape_str(t.shape()));
  int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "conv2d" || nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  throw std::invalid_argument(cat("init: unknown nonlinearity '", nonlinearity,
                                  "' (linear, conv2d, sigmoid, tanh, relu, leaky_relu)"));
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  return fill_counted<1>(t, g, [=](Generator& r) { return low + (high - low) * r.uniform(); });
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  return fill_counted<2>(t, g, [=](Generator& r) { return mean + std * r.normal(); });
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  RF_CHECK(a < b && a <= mean + 3 * std && b >= mean - 3 * std,
           "trunc_normal_: bounds [", a, ", ", b, "] miss the distribution N(", mean, ", ", std,
           ")");
  Generator& g = gen ? *gen : default_generator();
  return fill_with(t, [&] {
    double x;
    do {
      x = mean + std * g.normal();
    } while (x < a || x > b);
    return x;
  });
}

SkipInitGuard::SkipInitGuard() : previous_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = previous_; }
bool init_enabled() { return !skip_init; }

Tensor& constant_(Tensor& t, double value) {
  if (skip_init) return t;
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity,
                         Generator* gen) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan_of(t, mode));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity,
                        Generator* gen) {
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(fan_of(t, mode)), gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  const Fans f = calculate_fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.fan_in + f.fan_out));
  return uniform_(t, -bound, bound, gen);
}

void default_layer_init(Tensor& weight, Tensor& bias, Generator* gen) {
  kaiming_uniform_(weight, std::sqrt(5.0), FanMode::fan_in, "leaky_relu", gen);
  if (bias.defined()) {
    const double fan_in = static_cast<double>(calculate_fans(weight).fan_in);
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
    uniform_(bias, -bound, bound, gen);
  }
}

}  // namespace ringflow::nn::init
