// Fused multi-tensor optimizer updates (SGD with momentum, Nesterov and weight decay; Adam;
// AdamW), the rules of kernels/backend.h's SgdStep and AdamStep, with the grad scaler's
// unscale folded into their gradient reads and its skip on the device (LossScale), and the
// grad scaler's unscale-and-check and check alone. Many parameters go in one launch: each is cut into chunks of kChunk
// elements, one block per chunk, and a block finds its parameter (binary search) in a table
// of up to kMaxSlots passed with the launch: 512 parameters, so that every model here takes
// one launch per dtype (the table is ~24 KB of kernel parameters, which CUDA 12.1 and later
// take on Volta and newer GPUs; longer lists take several launches). Arithmetic in float
// (double for f64), one rounding per stored value.
#pragma once

#include <algorithm>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

constexpr int kMaxSlots = 512;       // parameters per launch: the table fits a launch's 32 KB
constexpr int64_t kChunk = 16 * kBlock;  // elements per block

struct SlotTable {
  int count = 0;
  OptimizerSlot slots[kMaxSlots];
  int64_t first_chunk[kMaxSlots + 1] = {};  // chunks before slot i; [count]: all chunks

  // Chunk c of the elements of type T: its parameter's tensors from the chunk's first
  // element on (null states stay null), and its length.
  template <class T>
  struct Chunk {
    T* param;
    const T* grad;
    T* state[2];
    int64_t len;
  };
  template <class T>
  RF_HD Chunk<T> chunk(int64_t c) const {
    int lo = 0, hi = count - 1;  // the slot i with first_chunk[i] <= c < first_chunk[i + 1]
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first_chunk[mid] <= c) lo = mid;
      else hi = mid - 1;
    }
    const int i = lo;
    const OptimizerSlot& s = slots[i];
    const int64_t start = (c - first_chunk[i]) * kChunk;
    const auto at = [start](void* p) { return p ? static_cast<T*>(p) + start : nullptr; };
    return {at(s.param), static_cast<const T*>(s.grad) + start, {at(s.state[0]), at(s.state[1])},
            s.numel - start < kChunk ? s.numel - start : kChunk};
  }
};

// The step's view of a LossScale: whether it is skipped, and gradient element g as the step
// uses it (unscaled and rounded to T, as unscale_grads would have stored it).
template <class T>
struct ScaledGrad {
  using A = acc_t<T>;
  bool scaled;
  A inv;
  RF_HD explicit ScaledGrad(const LossScale& s)
      : scaled(s.inv_scale != nullptr), inv(s.inv_scale ? static_cast<A>(*s.inv_scale) : A(1)) {}
  RF_HD static bool skipped(const LossScale& s) { return s.found_inf && *s.found_inf != 0.0f; }
  RF_HD A operator()(T g) const { return scaled ? load(store<T>(load(g) * inv)) : load(g); }
};

template <class T>
struct SgdBody {
  SlotTable table;
  SgdStep h;

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t chunk) const {
    using A = acc_t<T>;
    if (ScaledGrad<T>::skipped(h.scale)) return;
    const ScaledGrad<T> grad(h.scale);
    const auto c = table.template chunk<T>(chunk);
    T* p = c.param;
    const T* g = c.grad;
    T* buf = c.state[0];
    const int64_t len = c.len;
    const A lr = static_cast<A>(h.lr), wd = static_cast<A>(h.weight_decay);
    const A mom = static_cast<A>(h.momentum), keep = static_cast<A>(1 - h.dampening);
    block.for_each(len, [&](int64_t i) {
      const A pi = load(p[i]);
      A d = grad(g[i]);
      if (h.weight_decay != 0) d = d + wd * pi;
      if (buf) {
        const A b = h.first ? d : load(buf[i]) * mom + keep * d;
        buf[i] = store<T>(b);
        d = h.nesterov ? d + mom * b : b;
      }
      p[i] = store<T>(pi - lr * d);
    });
  }
};

template <class T>
struct AdamBody {
  SlotTable table;
  AdamStep h;

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t chunk) const {
    using A = acc_t<T>;
    if (ScaledGrad<T>::skipped(h.scale)) return;
    const ScaledGrad<T> grad(h.scale);
    const auto c = table.template chunk<T>(chunk);
    T* p = c.param;
    const T* g = c.grad;
    T *m = c.state[0], *v = c.state[1];
    const int64_t len = c.len;
    const A wd = static_cast<A>(h.weight_decay), decay = static_cast<A>(1 - h.lr * h.weight_decay);
    const A b1 = static_cast<A>(h.beta1), b2 = static_cast<A>(h.beta2);
    const A a1 = static_cast<A>(1 - h.beta1), a2 = static_cast<A>(1 - h.beta2);
    const A eps = static_cast<A>(h.eps), bc2 = static_cast<A>(h.bc2_sqrt);
    const A step = static_cast<A>(h.step_size);
    const bool coupled = !h.decoupled && h.weight_decay != 0;
    const bool decoupled = h.decoupled && h.weight_decay != 0;
    block.for_each(len, [&](int64_t i) {
      A pi = load(p[i]);
      if (decoupled) pi = pi * decay;
      A gi = grad(g[i]);
      if (coupled) gi = gi + wd * pi;
      const A mi = load(m[i]) * b1 + a1 * gi;
      const A vi = load(v[i]) * b2 + a2 * gi * gi;
      m[i] = store<T>(mi);
      v[i] = store<T>(vi);
      p[i] = store<T>(pi - step * (mi / (simt::sqrt(vi) / bc2 + eps)));
    });
  }
};

// The grad scaler's unscale and check (backend.h's unscale_grads; kWrite) or its check alone
// (check_scaled_grads): each slot's `param` is a gradient, multiplied by *inv_scale (and
// stored so when kWrite); a non-finite product sets *found_inf to 1.
template <class T, bool kWrite>
struct UnscaleBody {
  SlotTable table;
  const float* inv_scale;
  float* found_inf;

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t chunk) const {
    using A = acc_t<T>;
    const auto c = table.template chunk<T>(chunk);
    const A inv = static_cast<A>(*inv_scale);
    block.for_each(c.len, [&](int64_t i) {
      const A g = load(c.param[i]) * inv;
      if (simt::isnan(g) || simt::isnan(g - g)) *found_inf = 1.0f;  // NaN, or inf (inf - inf)
      if constexpr (kWrite) c.param[i] = store<T>(g);
    });
  }
};

// Runs body over `slots` in launches of at most kMaxSlots parameters.
template <class Exec, class Body, class Step>
void multi_tensor(const Exec& exec, const std::vector<OptimizerSlot>& slots, const Step& h,
                  const char* op, bool needs_grad = true) {
  for (size_t first = 0; first < slots.size(); first += kMaxSlots) {
    Body body{};
    set_step(body, h);
    const size_t n = std::min<size_t>(kMaxSlots, slots.size() - first);
    for (size_t i = 0; i < n; ++i) {
      const OptimizerSlot& s = slots[first + i];
      check(s.numel >= 0 && s.param && (s.grad || !needs_grad), op,
            "slot " + std::to_string(first + i) + " lacks its parameter or gradient");
      body.table.slots[i] = s;
      body.table.first_chunk[i + 1] = body.table.first_chunk[i] + (s.numel + kChunk - 1) / kChunk;
    }
    body.table.count = static_cast<int>(n);
    exec.rows(body.table.first_chunk[n], body);
  }
}

// The launch's constants into a body (multi_tensor's Step argument).
template <class Body, class Step>
void set_step(Body& body, const Step& h) {
  body.h = h;
}
struct UnscaleArgs {
  const float* inv_scale;
  float* found_inf;
};
template <class T, bool kWrite>
void set_step(UnscaleBody<T, kWrite>& body, const UnscaleArgs& a) {
  body.inv_scale = a.inv_scale;
  body.found_inf = a.found_inf;
}

// unscale_grads (kWrite) or check_scaled_grads.
template <class Exec, bool kWrite>
void unscale_grads(const Exec& exec, DType dtype, const std::vector<OptimizerSlot>& slots,
                   const View& inv_scale, const View& found_inf) {
  const char* op = kWrite ? "unscale_grads" : "check_scaled_grads";
  check(inv_scale.numel() == 1 && inv_scale.dtype == DType::f32 && found_inf.numel() == 1 &&
            found_inf.dtype == DType::f32,
        op, "inv_scale and found_inf must be one f32 each");
  visit_floating(dtype, op, [&](auto tag) {
    multi_tensor<Exec, UnscaleBody<decltype(tag), kWrite>>(
        exec, slots, UnscaleArgs{inv_scale.ptr<const float>(), found_inf.ptr<float>()}, op, /*needs_grad=*/false);
  });
}

template <class Exec>
void set_optimizer_kernels(Backend& b) {
  b.unscale_grads = [](DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                       const View& found_inf) { unscale_grads<Exec, true>(Exec{}, dtype, slots, inv_scale, found_inf); };
  b.check_scaled_grads = [](DType dtype, const std::vector<OptimizerSlot>& slots, const View& inv_scale,
                            const View& found_inf) {
    unscale_grads<Exec, false>(Exec{}, dtype, slots, inv_scale, found_inf);
  };
  b.sgd_step = [](DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& h) {
    visit_floating(dtype, "sgd_step", [&](auto tag) {
      multi_tensor<Exec, SgdBody<decltype(tag)>>(Exec{}, slots, h, "sgd_step");
    });
  };
  b.adam_step = [](DType dtype, const std::vector<OptimizerSlot>& slots, const AdamStep& h) {
    visit_floating(dtype, "adam_step", [&](auto tag) {
      for (const OptimizerSlot& s : slots)
        check(s.state[0] && s.state[1], "adam_step", "a slot lacks exp_avg or exp_avg_sq");
      multi_tensor<Exec, AdamBody<decltype(tag)>>(Exec{}, slots, h, "adam_step");
    });
  };
}

}  // namespace ringflow::simt
