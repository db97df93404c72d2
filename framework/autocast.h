// Automatic mixed precision, as torch.autocast: inside an AutocastGuard, convolutions,
// linear layers and matmuls cast their f32 operands to a 16-bit dtype and run in it (the
// kernels accumulate in f32), while softmax, log-softmax (and with it the losses) and
// sum/mean cast 16-bit operands up and run in f32; batch norm keeps its input's dtype
// (statistics and running buffers in f32), and other ops run in the dtype that arrives.
// Parameters stay f32 (the master weights the optimizer updates); the casts are
// differentiable, so each parameter's gradient arrives in f32 (and in the parameter's
// layout). A parameter is cast once per autocast region (PyTorch's autocast cache): the
// outermost guard keeps each parameter's cast while the parameter's version holds, so a
// weight several ops use is cast once per forward, and the cast they save serves their
// backward too. Per thread; backward runs with autocast off (its ops keep the dtypes of the
// forward's).
#pragma once

#include "ringflow/kernels/dtype.h"

namespace ringflow {

class AutocastGuard {
 public:
  // dtype: bf16 or f16 (throws otherwise); enabled false: autocast off inside the scope.
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool was_enabled_;
  DType was_dtype_;
  // The outermost guard of a thread empties the cast cache at its end.
};

bool autocast_enabled();
DType autocast_dtype();  // meaningful while enabled

class Tensor;
// What the ops call on their operands. To the autocast dtype: f32 tensors while autocast is
// on, others unchanged (an undefined tensor stays undefined). channels_last: a 4-D operand's
// cast laid out NHWC (the weight of a convolution that runs channels-last: one kernel casts
// and reorders). Parameters (leaves that require grad) come from the region's cache.
Tensor autocast_to_low(const Tensor& t, bool channels_last = false);
// Casts the current region's cache holds (for tests).
size_t autocast_cached_casts();
// To f32: 16-bit float tensors while autocast is on.
Tensor autocast_to_f32(const Tensor& t);

}  // namespace ringflow
