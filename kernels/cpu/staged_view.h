// A kernel's operand in the dtype and layout the kernel computes in: the caller's view
// itself where it already is so, else a scratch copy, copied in for an input; finish()
// writes an output back. Widened (widen.h), Strided (blocked operands for code that reads
// strides) and the Winograd convolutions' channels-last activations are such operands.
#pragma once

#include <algorithm>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/dnnl_context.h"

namespace ringflow::cpu {

class StagedView {
 public:
  // A copy of v in `dtype` with `strides` (a strided layout) when `stage`, else v.
  StagedView(const View& v, bool stage, DType dtype, const Shape& strides, bool is_input)
      : original_(v), view_(v) {
    if (!stage) return;
    buffer_ = ScratchBuffer(std::max<size_t>(1, static_cast<size_t>(v.numel()) * dtype_size(dtype)));
    view_.data = buffer_.data();
    view_.dtype = dtype;
    view_.strides = strides;
    view_.layout = MemoryLayout::strided;
    view_.derived = nullptr;  // scratch: nothing may be cached against it
    if (is_input) copy(view_, original_);
  }
  const View& view() const { return view_; }
  const View* ptr() const { return &view_; }
  void finish() const {
    if (buffer_.data()) copy(original_, view_);
  }

 private:
  View original_;
  View view_;
  ScratchBuffer buffer_;
};

// A blocked operand (Note [blocked operands]) as a contiguous copy, for the code that reads
// strides: the reference kernels the oneDNN ones fall back to, and own loops.
class Strided : public StagedView {
 public:
  Strided(const View& v, bool is_input)
      : StagedView(v, v.layout != MemoryLayout::strided, v.dtype, contiguous_strides(v.shape), is_input) {}
};

}  // namespace ringflow::cpu
