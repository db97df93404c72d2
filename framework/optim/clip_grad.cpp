#include "ringflow/framework/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::optim {
namespace {

// sum |g|^p (or max |g| when p is infinite) of one gradient, in f64.
template <class T>
double accumulate(const T* g, int64_t n, double p) {
  double acc = 0;
  if (std::isinf(p)) {
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(static_cast<double>(g[i]));
      if (std::isnan(a)) return a;  // as PyTorch's: a NaN makes the norm NaN
      acc = std::max(acc, a);
    }
  } else if (p == 2) {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::fabs(static_cast<double>(g[i])), p);
  }
  return acc;
}

// The gradients that params hold, and their norm.
double grad_norm_of(const std::vector<Tensor>& params, double norm_type, std::vector<Tensor>& grads) {
  RF_CHECK(norm_type > 0, "gradient norm: norm_type must be positive, got ", norm_type);
  NoGradGuard no_grad;
  const bool inf_norm = std::isinf(norm_type);
  double total = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    double part;
    if (g.device().is_cpu() && (g.is_contiguous() || g.is_channels_last()) &&
        (g.dtype() == DType::f32 || g.dtype() == DType::f64)) {
      part = g.dtype() == DType::f64 ? accumulate(g.data<double>(), g.numel(), norm_type)
                                     : accumulate(g.data<float>(), g.numel(), norm_type);
    } else {
      const Tensor a = abs(g.to(DType::f64));
      part = inf_norm ? max(a).item() : sum(norm_type == 2 ? mul(a, a) : pow(a, norm_type)).item();
    }
    if (!inf_norm) {
      total += part;
    } else if (std::isnan(part) || part > total) {
      total = part;  // a NaN stays
    }
  }
  return inf_norm ? total : std::pow(total, 1.0 / norm_type);
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params, double norm_type) {
  std::vector<Tensor> grads;
  return grad_norm_of(params, norm_type, grads);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  std::vector<Tensor> grads;
  const double norm = grad_norm_of(params, norm_type, grads);
  if (grads.empty()) return 0.0;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1)
    for (Tensor& g : grads) g.mul_(coef);
  return norm;
}

}  // namespace ringflow::optim
