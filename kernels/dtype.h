// Element types ringflow stores, and exact conversions for the 16-bit floats.
// f16 and bf16 are storage types: arithmetic converts them to float (kernels accumulate
// in float or double) and rounds back to nearest-even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ringflow {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...
DType dtype_from_name(const std::string& name);  // throws on an unknown name
bool is_floating(DType dtype);

// IEEE binary16 <-> binary32, round to nearest even; NaN stays NaN, overflow gives inf.
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
// bfloat16 <-> binary32, round to nearest even; NaN stays a quiet NaN.
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float v) : bits(float_to_half_bits(v)) {}
  Half(double v) : bits(float_to_half_bits(static_cast<float>(v))) {}
  static Half from_bits(uint16_t b) { Half h; h.bits = b; return h; }
  operator float() const { return half_bits_to_float(bits); }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float v) : bits(float_to_bf16_bits(v)) {}
  BFloat16(double v) : bits(float_to_bf16_bits(static_cast<float>(v))) {}
  static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
  operator float() const { return bf16_bits_to_float(bits); }
};

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

// Calls fn(T{}) with the C++ type of `dtype`: the one switch over dtypes.
template <class Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::f16: return fn(Half{});
    case DType::bf16: return fn(BFloat16{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
  }
  return fn(float{});  // unreachable
}

}  // namespace ringflow
