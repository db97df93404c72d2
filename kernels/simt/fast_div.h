// Division by a divisor fixed at launch, as a multiply-high and a shift: a GPU has no integer
// divider, and a 64-bit `/` or `%` costs it dozens of instructions (pooling's index arithmetic,
// several divisions per element, made its kernels compute-bound: docs/cuda.md).
#pragma once

#include <cstdint>

#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

// n / d for 0 <= n <= max_n, built on the host. Where d and max_n are below 2^31, the
// round-up method of Granlund and Montgomery (PLDI 1994): with s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s, exact for every such n.
// Otherwise a plain division.
class FastDiv {
 public:
  FastDiv() = default;
  FastDiv(int64_t d, int64_t max_n) : d_(d) {
    fast_ = d >= 1 && d < (int64_t{1} << 31) && max_n < (int64_t{1} << 31);
    if (!fast_) return;
    while ((int64_t{1} << shift_) < d) ++shift_;
    mul_ = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift_) - static_cast<uint64_t>(d))) /
                                     static_cast<uint64_t>(d) +
                                 1);
  }

  // n in [0, max_n]: outside it the fast path's quotient is wrong.
  RF_HD int64_t div(int64_t n) const {
    if (!fast_) return n / d_;
    const uint32_t u = static_cast<uint32_t>(n);
    return static_cast<int64_t>((static_cast<uint64_t>(mulhi(u, mul_)) + u) >> shift_);
  }
  RF_HD int64_t mod(int64_t n) const { return n - div(n) * d_; }
  RF_HD int64_t divisor() const { return d_; }
  // n / d into q, n % d into r.
  RF_HD void divmod(int64_t n, int64_t& q, int64_t& r) const {
    q = div(n);
    r = n - q * d_;
  }

 private:
  RF_HD static uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
  }

  int64_t d_ = 1;
  uint32_t mul_ = 0;
  uint8_t shift_ = 0;  // 16 bytes in all: kernel parameters carry one per indexed dim
  bool fast_ = false;
};

}  // namespace ringflow::simt
