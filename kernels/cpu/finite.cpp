// Whether a view holds only finite values, read as bits (an all-ones exponent is inf or
// NaN), in one parallel pass: oneDNN's pooling and softmax take the maximum of a window or
// row as vmaxps does, which drops a NaN, so inputs that are not all finite go to the
// reference kernels, whose results are PyTorch's (tests/torch_ops_test.cpp, nonfinite).
#include <atomic>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/loop.h"

namespace ringflow::cpu {
namespace {

template <class Bits>
bool exponents_below(const LoopPlan& plan, const void* data, Bits exponent) {
  const Bits* base = static_cast<const Bits*>(data);
  std::atomic<bool> found{false};
  parallel_loop(plan, [&](int64_t o, int64_t b, int64_t e) {
    const Bits* p = base + plan.offset(0, o);
    int hit = 0;
#pragma omp simd reduction(| : hit)
    for (int64_t i = b; i < e; ++i) hit |= (p[i] & exponent) == exponent;
    if (hit) found.store(true, std::memory_order_relaxed);
  });
  return !found.load();
}

}  // namespace

bool all_finite(const View& v) {
  LoopPlan plan;
  if (v.numel() == 0) return true;
  if (!make_loop_plan(plan, v, {})) return false;
  switch (v.dtype) {
    case DType::f32: return exponents_below<uint32_t>(plan, v.data, 0x7f800000u);
    case DType::bf16: return exponents_below<uint16_t>(plan, v.data, 0x7f80u);
    case DType::f16: return exponents_below<uint16_t>(plan, v.data, 0x7c00u);
    default: return false;
  }
}

}  // namespace ringflow::cpu
