// How the CPU's own loops read and write an element of each floating dtype they take:
// arithmetic in f32, 16-bit results rounded once (as a 16-bit kernel with f32 arithmetic
// gives). Shared by the elementwise loops and the fused batch norm.
#pragma once

#include <cstdint>

#include "ringflow/kernels/cpu/bf16.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow::cpu {

struct F32 {
  using T = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
struct BF16 {
  using T = uint16_t;
  static float load(uint16_t x) { return from_bf16(x); }
  static uint16_t store(float x) { return to_bf16(x); }
};
struct F16 {
  using T = uint16_t;
  static float load(uint16_t x) { return half_bits_to_float(x); }
  static uint16_t store(float x) { return float_to_half_bits(x); }
};

// fn(E{}) for the traits of dtype (fn says whether it ran); false for another dtype.
template <class Fn>
bool with_elem(DType dtype, Fn fn) {
  switch (dtype) {
    case DType::f32: return fn(F32{});
    case DType::bf16: return fn(BF16{});
    case DType::f16: return fn(F16{});
    default: return false;
  }
}

}  // namespace ringflow::cpu
