#include "framework/optim/adam.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/ops.h"

namespace ringflow::optim {
namespace {

struct StepConstants {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  double step_size;     // lr / (1 - beta1^t)
  double bc2_sqrt;      // sqrt(1 - beta2^t)
};

template <class T>
void adam_loop(T* p, const T* g, T* m, T* v, int64_t n, const StepConstants& c) {
  const T wd = static_cast<T>(c.weight_decay), decay = static_cast<T>(1 - c.lr * c.weight_decay);
  const T b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2);
  const T a1 = static_cast<T>(1 - c.beta1), a2 = static_cast<T>(1 - c.beta2);
  const T eps = static_cast<T>(c.eps), bc2 = static_cast<T>(c.bc2_sqrt);
  const T neg_step = static_cast<T>(-c.step_size);
  const bool coupled = !c.decoupled && c.weight_decay != 0;
  const bool decoupled = c.decoupled && c.weight_decay != 0;
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    if (decoupled) pi = pi * decay;
    T gi = g[i];
    if (coupled) gi = gi + wd * pi;
    const T mi = m[i] * b1 + a1 * gi;
    const T vi = v[i] * b2 + a2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + neg_step * (mi / (std::sqrt(vi) / bc2 + eps));
  }
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::move(params), o, /*decoupled=*/false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params), o.lr), options_(o), decoupled_(decoupled) {
  const char* name = decoupled ? "AdamW" : "Adam";
  RF_CHECK(o.eps >= 0, name, ": invalid eps ", o.eps);
  RF_CHECK(o.beta1 >= 0 && o.beta1 < 1, name, ": invalid beta1 ", o.beta1);
  RF_CHECK(o.beta2 >= 0 && o.beta2 < 1, name, ": invalid beta2 ", o.beta2);
  RF_CHECK(o.weight_decay >= 0, name, ": invalid weight_decay ", o.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::move(params), o, /*decoupled=*/true) {}

std::vector<std::string> Adam::state_keys() const { return {"step", "exp_avg", "exp_avg_sq"}; }

void Adam::step() {
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    auto& st = state_[i];
    if (st.empty()) {
      st["step"] = scalar_tensor(0, DType::f64);
      st["exp_avg"] = zeros_like(p);
      st["exp_avg_sq"] = zeros_like(p);
    }
    Tensor& step_t = st["step"];
    const double t = step_t.item() + 1;
    step_t.data<double>()[0] = t;
    Tensor m = st["exp_avg"], v = st["exp_avg_sq"];
    const StepConstants c{lr_, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled_,
                          lr_ / (1 - std::pow(o.beta1, t)), std::sqrt(1 - std::pow(o.beta2, t))};

    if (same_dense_cpu_layout({p, g, m, v})) {
      if (p.dtype() == DType::f64)
        adam_loop(p.data<double>(), g.data<double>(), m.data<double>(), v.data<double>(), p.numel(), c);
      else
        adam_loop(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), p.numel(), c);
      for (const Tensor& u : {p, m, v}) u.storage()->bump_version();
      continue;
    }
    // Any device or layout: the same rule with tensor ops.
    Tensor grad = g;
    if (o.weight_decay != 0) {
      if (decoupled_) p.mul_(1 - lr_ * o.weight_decay);
      else grad = add(g, mul(p, o.weight_decay));
    }
    m.mul_(o.beta1).add_(grad, 1 - o.beta1);
    v.mul_(o.beta2).add_(mul(grad, grad), 1 - o.beta2);
    const Tensor denom = add(div(sqrt(v), c.bc2_sqrt), o.eps);
    p.add_(div(m, denom), -c.step_size);
  }
}

}  // namespace ringflow::optim
