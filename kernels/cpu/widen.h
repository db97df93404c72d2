// 16-bit operands of the CPU's convolutions, matmul, batch norm and pooling run through the
// f32 kernels where the CPU lacks their arithmetic: the backend sends oneDNN no f16 (it has
// f16 kernels only with AVX512-FP16), and bf16 without AVX512-BF16 would go to the
// reference loops, far slower (docs/kernels.md). Inputs are widened exactly; outputs are
// rounded back once, so the result is what a 16-bit kernel with f32 accumulation gives (up
// to the order of sums).
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/dnnl_context.h"
#include "ringflow/kernels/cpu/staged_view.h"

namespace ringflow::cpu {

inline bool widens(DType dt) {
  return dt == DType::f16 || (dt == DType::bf16 && !cpu_native_bf16());
}

// A dense f32 copy of a view of a dtype that widens (or the view itself otherwise), in the
// view's own layout when that is dense. For an output, finish() rounds the f32 values back.
class Widened : public StagedView {
 public:
  Widened(const View& v, bool is_input)
      : StagedView(v, widens(v.dtype), DType::f32,
                   is_dense(v) ? v.strides : contiguous_strides(v.shape), is_input) {}
};

inline bool any_widens(std::initializer_list<const View*> views) {
  for (const View* v : views)
    if (v && widens(v->dtype)) return true;
  return false;
}

}  // namespace ringflow::cpu
