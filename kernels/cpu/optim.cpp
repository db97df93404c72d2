// Fused optimizer steps on the CPU for f32 and f64 (one loop per parameter, in the dtype
// itself); other dtypes take the reference loops.
#include <cmath>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/reference/reference_kernels.h"

namespace ringflow::cpu {
namespace {

template <class T>
void sgd_loop(const OptimizerSlot& s, const SgdStep& h) {
  T* p = static_cast<T*>(s.param);
  const T* g = static_cast<const T*>(s.grad);
  T* buf = static_cast<T*>(s.state[0]);
  const T wd = static_cast<T>(h.weight_decay), mom = static_cast<T>(h.momentum);
  const T keep = static_cast<T>(1 - h.dampening), neg_lr = static_cast<T>(-h.lr);
  for (int64_t i = 0; i < s.numel; ++i) {
    T d = g[i];
    if (h.weight_decay != 0) d = d + wd * p[i];
    if (buf) {
      const T b = h.first ? d : buf[i] * mom + keep * d;
      buf[i] = b;
      d = h.nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

template <class T>
void adam_loop(const OptimizerSlot& s, const AdamStep& h) {
  T* p = static_cast<T*>(s.param);
  const T* g = static_cast<const T*>(s.grad);
  T* m = static_cast<T*>(s.state[0]);
  T* v = static_cast<T*>(s.state[1]);
  const T wd = static_cast<T>(h.weight_decay), decay = static_cast<T>(1 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T a1 = static_cast<T>(1 - h.beta1), a2 = static_cast<T>(1 - h.beta2);
  const T eps = static_cast<T>(h.eps), bc2 = static_cast<T>(h.bc2_sqrt);
  const T neg_step = static_cast<T>(-h.step_size);
  const bool coupled = !h.decoupled && h.weight_decay != 0;
  const bool decoupled = h.decoupled && h.weight_decay != 0;
  for (int64_t i = 0; i < s.numel; ++i) {
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

// This table has no check_scaled_grads: no grad scaler hands it a scaled step.
void refuse_loss_scale(const LossScale& s, const char* op) {
  if (s.inv_scale || s.found_inf)
    throw std::invalid_argument(std::string("cpu ") + op +
                                ": the CPU table takes no LossScale (it has no check_scaled_grads; unscale first)");
}

}  // namespace

void sgd_step(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& h) {
  refuse_loss_scale(h.scale, "sgd_step");
  if (dtype != DType::f32 && dtype != DType::f64) return reference::sgd_step(dtype, slots, h);
  for (const OptimizerSlot& s : slots)
    dtype == DType::f32 ? sgd_loop<float>(s, h) : sgd_loop<double>(s, h);
}

void adam_step(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamStep& h) {
  refuse_loss_scale(h.scale, "adam_step");
  if (dtype != DType::f32 && dtype != DType::f64) return reference::adam_step(dtype, slots, h);
  for (const OptimizerSlot& s : slots) {
    if (!s.state[0] || !s.state[1])
      throw std::invalid_argument("cpu adam_step: a slot lacks exp_avg or exp_avg_sq");
    dtype == DType::f32 ? adam_loop<float>(s, h) : adam_loop<double>(s, h);
  }
}

}  // namespace ringflow::cpu
