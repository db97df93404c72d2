// f16 operands of the CPU's convolutions and matmul run through the f32 kernels: oneDNN
// has f16 convolutions only on CPUs with AVX512-FP16, and the reference loops are two orders
// of magnitude slower. Inputs are widened exactly; outputs are rounded back to f16 once, so
// the result is what an f16 kernel with f32 accumulation gives (up to the order of sums).
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/dnnl_context.h"

namespace ringflow::cpu {

// A dense f32 copy of an f16 view (or the view itself when it is not f16). For an output,
// finish() rounds the f32 values back into it.
class Widened {
 public:
  Widened(const View& v, bool is_input) : original_(v), view_(v) {
    if (v.dtype != DType::f16) return;
    buffer_ = ScratchBuffer(std::max<size_t>(1, static_cast<size_t>(v.numel()) * sizeof(float)));
    view_.data = buffer_.data();
    view_.dtype = DType::f32;
    view_.strides = contiguous_strides(v.shape);
    view_.storage_id = nullptr;  // scratch: nothing may be cached against it
    if (is_input) copy(view_, original_);
  }
  const View& view() const { return view_; }
  const View* ptr() const { return &view_; }
  void finish() const {
    if (original_.dtype == DType::f16) copy(original_, view_);
  }

 private:
  View original_;
  View view_;
  ScratchBuffer buffer_;
};

inline bool any_f16(std::initializer_list<const View*> views) {
  for (const View* v : views)
    if (v && v->dtype == DType::f16) return true;
  return false;
}

}  // namespace ringflow::cpu
