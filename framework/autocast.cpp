#include "ringflow/framework/autocast.h"

#include "ringflow/framework/error.h"
#include "ringflow/framework/tensor.h"

namespace ringflow {
namespace {

thread_local bool enabled = false;
thread_local DType low = DType::bf16;

}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool on) : was_enabled_(enabled), was_dtype_(low) {
  RF_CHECK(dtype == DType::bf16 || dtype == DType::f16, "autocast runs in bf16 or f16, not ",
           dtype_name(dtype));
  enabled = on;
  low = dtype;
}

AutocastGuard::~AutocastGuard() {
  enabled = was_enabled_;
  low = was_dtype_;
}

bool autocast_enabled() { return enabled; }
DType autocast_dtype() { return low; }

Tensor autocast_to_low(const Tensor& t) {
  if (!enabled || !t.defined() || t.dtype() != DType::f32) return t;
  return t.to(low);
}

Tensor autocast_to_f32(const Tensor& t) {
  if (!enabled || !t.defined() || (t.dtype() != DType::bf16 && t.dtype() != DType::f16)) return t;
  return t.to(DType::f32);
}

}  // namespace ringflow
