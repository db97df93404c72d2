// f16 and bf16 conversions against exact cases: values from the IEEE 754 binary16 and
// bfloat16 definitions (bit patterns of known numbers, ties to even, subnormals, overflow).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "ringflow/kernels/dtype.h"

using namespace ringflow;

TEST_CASE("f16 from float: exact values, rounding ties to even, range limits") {
  CHECK(float_to_half_bits(0.0f) == 0x0000);
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(-2.0f) == 0xc000);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);              // largest finite
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);              // tie above max rounds to inf
  CHECK(float_to_half_bits(65519.0f) == 0x7bff);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -14)) == 0x0400); // smallest normal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001); // smallest subnormal
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000); // half of it: tie to even (0)
  CHECK(float_to_half_bits(std::ldexp(3.0f, -26)) == 0x0001); // 0.75 ulp rounds up
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002); // 1.5 ulp: tie to even (2)
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1.
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: -> 1 + 2^-9.
  CHECK(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(float_to_half_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK((float_to_half_bits(std::nanf("")) & 0x7fff) > 0x7c00);
}

TEST_CASE("f16 to float is exact for every bit pattern (round trip)") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = half_bits_to_float(bits);
    if (std::isnan(f)) {
      CHECK(((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0));
      continue;
    }
    REQUIRE(float_to_half_bits(f) == bits);
  }
  CHECK(half_bits_to_float(0x3555) == std::ldexp(1.0f + 341.0f / 1024.0f, -2));  // 0 01101 0101010101
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
}

TEST_CASE("bf16: truncation of exact values, ties to even, NaN stays NaN") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bf16_bits(-2.0f) == 0xc000);
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie -> even
  CHECK(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie -> even (up)
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -9)) == 0x3f80);      // below half
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::infinity()) == 0x7f80);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) REQUIRE(float_to_bf16_bits(f) == b);
  }
}

TEST_CASE("Half and BFloat16 convert through float") {
  CHECK(static_cast<float>(Half(0.5f)) == 0.5f);
  CHECK(static_cast<float>(BFloat16(3.0)) == 3.0f);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_from_name("f16") == DType::f16);
  CHECK_THROWS_AS(dtype_from_name("f8"), std::invalid_argument);
}
