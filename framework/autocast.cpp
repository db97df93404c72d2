#include "ringflow/framework/autocast.h"

#include <map>
#include <tuple>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/error.h"
#include "ringflow/framework/tensor.h"

namespace ringflow {
namespace {

thread_local bool enabled = false;
thread_local DType low = DType::bf16;
thread_local int depth = 0;  // AutocastGuards alive on this thread

// A parameter's cast, valid while the parameter's storage has `version` (an optimizer step
// in between makes a new one) and its node has not been through a backward pass (which frees
// it: a second forward and backward in one region casts again).
struct CachedCast {
  uint64_t version;
  Tensor cast;
};
// By (parameter, dtype, channels-last).
using CastKey = std::tuple<const TensorImpl*, DType, bool>;
thread_local std::map<CastKey, CachedCast> cache;

bool still_valid(const CachedCast& c, const Tensor& param) {
  return c.cast.defined() && c.version == param.version() && c.cast.grad_fn() && !c.cast.grad_fn()->released();
}

}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool on) : was_enabled_(enabled), was_dtype_(low) {
  RF_CHECK(dtype == DType::bf16 || dtype == DType::f16, "autocast runs in bf16 or f16, not ",
           dtype_name(dtype));
  enabled = on;
  low = dtype;
  ++depth;
}

AutocastGuard::~AutocastGuard() {
  enabled = was_enabled_;
  low = was_dtype_;
  if (--depth == 0) cache.clear();
}

size_t autocast_cached_casts() { return cache.size(); }

bool autocast_enabled() { return enabled; }
DType autocast_dtype() { return low; }

Tensor autocast_to_low(const Tensor& t, bool channels_last) {
  if (!enabled || !t.defined() || t.dtype() != DType::f32) return t;
  const bool cl = channels_last && t.dim() == 4;
  const auto cast = [&] { return cl ? t.to(low, /*channels_last=*/true) : t.to(low); };
  // Only parameters, in a forward that records: other tensors are the ops' own, used once,
  // and a cast made without its node would cut a later use off from the parameter.
  if (!t.is_leaf() || !t.requires_grad() || !grad_mode_enabled()) return cast();
  CachedCast& entry = cache[CastKey{t.impl(), low, cl}];
  if (!still_valid(entry, t)) entry = CachedCast{t.version(), cast()};
  return entry.cast;
}

Tensor autocast_to_f32(const Tensor& t) {
  if (!enabled || !t.defined() || (t.dtype() != DType::bf16 && t.dtype() != DType::f16)) return t;
  return t.to(DType::f32);
}

}  // namespace ringflow
