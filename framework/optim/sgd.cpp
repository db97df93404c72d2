#include "framework/optim/sgd.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/ops.h"

namespace ringflow::optim {
namespace {

// The fused rule over n dense elements; buf is null when momentum == 0.
template <class T>
void sgd_loop(T* p, const T* g, T* buf, bool first, int64_t n, const SGDOptions& o, double lr) {
  const T wd = static_cast<T>(o.weight_decay), mom = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1 - o.dampening), neg_lr = static_cast<T>(-lr);
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (o.weight_decay != 0) d = d + wd * p[i];
    if (buf) {
      const T b = first ? d : buf[i] * mom + keep * d;
      buf[i] = b;
      d = o.nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer(std::move(params), o.lr), options_(o) {
  RF_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum);
  RF_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay);
  RF_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
}

std::vector<std::string> SGD::state_keys() const { return {"momentum_buffer"}; }

void SGD::step() {
  NoGradGuard no_grad;
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool use_momentum = o.momentum != 0;
    const bool first = use_momentum && !state_[i].count("momentum_buffer");
    if (first) state_[i]["momentum_buffer"] = empty_like(p);
    Tensor buf = use_momentum ? state_[i]["momentum_buffer"] : Tensor();

    if (same_dense_cpu_layout(use_momentum ? std::vector<Tensor>{p, g, buf} : std::vector<Tensor>{p, g})) {
      if (p.dtype() == DType::f64)
        sgd_loop(p.data<double>(), g.data<double>(), use_momentum ? buf.data<double>() : nullptr,
                 first, p.numel(), o, lr_);
      else
        sgd_loop(p.data<float>(), g.data<float>(), use_momentum ? buf.data<float>() : nullptr,
                 first, p.numel(), o, lr_);
      p.storage()->bump_version();
      if (use_momentum) buf.storage()->bump_version();
      continue;
    }
    // Any device or layout: the same rule with tensor ops.
    Tensor d = o.weight_decay != 0 ? add(g, mul(p, o.weight_decay)) : g;
    if (use_momentum) {
      if (first) buf.copy_(d);
      else buf.mul_(o.momentum).add_(d, 1 - o.dampening);
      d = o.nesterov ? add(d, mul(buf, o.momentum)) : buf;
    }
    p.add_(d, -lr_);
  }
}

}  // namespace ringflow::optim
