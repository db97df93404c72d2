// Fused optimizer steps (kernels/backend.h's SgdStep and AdamStep, LossScale included) and the
// grad scaler's unscale and check, element by element in double, any floating dtype: the
// oracle for the CPU and CUDA versions.
#include <cmath>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::load_f64;
using strided::store_f64;

namespace {

// A dense 1-D view of n elements of `dtype` at p (null p: an empty view).
View flat(const void* p, DType dtype, int64_t n) {
  View v;
  v.data = const_cast<void*>(p);
  v.dtype = dtype;
  v.shape = {n};
  v.strides = {1};
  return v;
}

// x rounded to dtype, as a store and a load would round it.
double rounded(DType dtype, double x) {
  alignas(8) char cell[8];
  const View v = flat(cell, dtype, 1);
  store_f64(v, 0, x);
  return load_f64(v, 0);
}

// A step's LossScale (backend.h): whether it is skipped, and gradient element i of g as the
// step uses it, unscaled and rounded to the dtype as unscale_grads would have stored it.
struct ScaledGrad {
  const View& g;
  const double* inv;  // null: not scaled
  double operator()(int64_t i) const { return inv ? rounded(g.dtype, load_f64(g, i) * *inv) : load_f64(g, i); }
};
bool skipped(const LossScale& s) { return s.found_inf && *s.found_inf != 0.0f; }

}  // namespace

void sgd_step(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& h) {
  check(is_floating(dtype), "sgd_step", std::string("needs a floating dtype, got ") + dtype_name(dtype));
  if (skipped(h.scale)) return;
  const double inv = h.scale.inv_scale ? *h.scale.inv_scale : 1.0;
  for (const OptimizerSlot& s : slots) {
    const View p = flat(s.param, dtype, s.numel), g = flat(s.grad, dtype, s.numel);
    const View buf = flat(s.state[0], dtype, s.numel);
    const ScaledGrad grad{g, h.scale.inv_scale ? &inv : nullptr};
    for (int64_t i = 0; i < s.numel; ++i) {
      const double pi = load_f64(p, i);
      double d = grad(i);
      if (h.weight_decay != 0) d += h.weight_decay * pi;
      if (s.state[0]) {
        const double b = h.first ? d : load_f64(buf, i) * h.momentum + (1 - h.dampening) * d;
        store_f64(buf, i, b);
        d = h.nesterov ? d + h.momentum * b : b;
      }
      store_f64(p, i, pi - h.lr * d);
    }
  }
}

void adam_step(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamStep& h) {
  check(is_floating(dtype), "adam_step", std::string("needs a floating dtype, got ") + dtype_name(dtype));
  for (const OptimizerSlot& s : slots)
    check(s.state[0] && s.state[1], "adam_step", "a slot lacks exp_avg or exp_avg_sq");
  if (skipped(h.scale)) return;
  const double inv = h.scale.inv_scale ? *h.scale.inv_scale : 1.0;
  for (const OptimizerSlot& s : slots) {
    const View p = flat(s.param, dtype, s.numel), g = flat(s.grad, dtype, s.numel);
    const View m = flat(s.state[0], dtype, s.numel), v = flat(s.state[1], dtype, s.numel);
    const ScaledGrad grad{g, h.scale.inv_scale ? &inv : nullptr};
    for (int64_t i = 0; i < s.numel; ++i) {
      double pi = load_f64(p, i), gi = grad(i);
      if (h.weight_decay != 0) {
        if (h.decoupled) pi *= 1 - h.lr * h.weight_decay;
        else gi += h.weight_decay * pi;
      }
      const double mi = load_f64(m, i) * h.beta1 + (1 - h.beta1) * gi;
      const double vi = load_f64(v, i) * h.beta2 + (1 - h.beta2) * gi * gi;
      store_f64(m, i, mi);
      store_f64(v, i, vi);
      store_f64(p, i, pi - h.step_size * (mi / (std::sqrt(vi) / h.bc2_sqrt + h.eps)));
    }
  }
}

namespace {

// unscale_grads (write) or check_scaled_grads.
void unscale_or_check(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                      const View& found_inf, bool write) {
  const char* op = write ? "unscale_grads" : "check_scaled_grads";
  check(is_floating(dtype), op, std::string("needs a floating dtype, got ") + dtype_name(dtype));
  check(inv_scale.numel() == 1 && inv_scale.dtype == DType::f32 && found_inf.numel() == 1 &&
            found_inf.dtype == DType::f32,
        op, "inv_scale and found_inf must be one f32 each");
  const double inv = load_f64(inv_scale, 0);
  bool inf = false;
  for (const OptimizerSlot& s : slots) {
    const View g = flat(s.param, dtype, s.numel);
    for (int64_t i = 0; i < s.numel; ++i) {
      const double v = load_f64(g, i) * inv;
      inf |= !std::isfinite(v);
      if (write) store_f64(g, i, v);
    }
  }
  if (inf) store_f64(found_inf, 0, 1.0);
}

}  // namespace

void unscale_grads(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                   const View& found_inf) {
  unscale_or_check(dtype, slots, inv_scale, found_inf, /*write=*/true);
}

void check_scaled_grads(DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                        const View& found_inf) {
  unscale_or_check(dtype, slots, inv_scale, found_inf, /*write=*/false);
}

}  // namespace ringflow::reference
