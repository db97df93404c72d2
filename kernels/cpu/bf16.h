// Inline bf16 <-> f32 for the CPU kernels' inner loops (kernels/dtype.h has the same
// conversions out of line; these vectorize).
#pragma once

#include <cstdint>
#include <cstring>

namespace ringflow::cpu {

// Round to nearest even; NaN stays a quiet NaN.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace ringflow::cpu
