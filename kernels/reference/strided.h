// Strided N-d iteration and dtype-erased element access over Views: the two things every
// naive kernel needs. Header-only so that other backends may reuse it for slow fallbacks.
// Nothing here assumes contiguity; strides are in elements and may be 0 (broadcast).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/view.h"

namespace ringflow::strided {

// Calls fn(offsets) for every multi-index of `shape` in row-major order, where offsets[i]
// is the element offset of that index under strides[i]. Offsets are carried from step to
// step (an add per step, a subtract per carry) rather than recomputed.
template <class Fn, class... Strides>
void for_each_offset(const Shape& shape, Fn&& fn, const Strides&... strides) {
  constexpr size_t N = sizeof...(Strides);
  const std::array<const Shape*, N> st{&strides...};
  const int nd = static_cast<int>(shape.size());
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> off{};
  for (int64_t step = 0; step < total; ++step) {
    fn(static_cast<const std::array<int64_t, N>&>(off));
    for (int d = nd - 1; d >= 0; --d) {
      ++idx[d];
      for (size_t i = 0; i < N; ++i) off[i] += (*st[i])[d];
      if (idx[d] < shape[d]) break;
      for (size_t i = 0; i < N; ++i) off[i] -= (*st[i])[d] * shape[d];
      idx[d] = 0;
    }
  }
}

// Element offset of a 4-D index (n, c, h, w) in v.
inline int64_t offset4(const View& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  return n * v.strides[0] + c * v.strides[1] + h * v.strides[2] + w * v.strides[3];
}

// Reads element `off` of v as a double / int64 and writes it back rounded to v.dtype
// (nearest-even for f16/bf16, truncation toward zero for integers, as static_cast).
inline double load_f64(const View& v, int64_t off) {
  const char* base = static_cast<const char*>(v.data);
  switch (v.dtype) {
    case DType::f32: return reinterpret_cast<const float*>(base)[off];
    case DType::f64: return reinterpret_cast<const double*>(base)[off];
    case DType::f16: return static_cast<float>(reinterpret_cast<const Half*>(base)[off]);
    case DType::bf16: return static_cast<float>(reinterpret_cast<const BFloat16*>(base)[off]);
    case DType::i32: return reinterpret_cast<const int32_t*>(base)[off];
    case DType::i64: return static_cast<double>(reinterpret_cast<const int64_t*>(base)[off]);
  }
  return 0.0;
}

inline int64_t load_i64(const View& v, int64_t off) {
  const char* base = static_cast<const char*>(v.data);
  switch (v.dtype) {
    case DType::i32: return reinterpret_cast<const int32_t*>(base)[off];
    case DType::i64: return reinterpret_cast<const int64_t*>(base)[off];
    default: return static_cast<int64_t>(load_f64(v, off));
  }
}

inline void store_f64(const View& v, int64_t off, double x) {
  char* base = static_cast<char*>(v.data);
  switch (v.dtype) {
    case DType::f32: reinterpret_cast<float*>(base)[off] = static_cast<float>(x); return;
    case DType::f64: reinterpret_cast<double*>(base)[off] = x; return;
    case DType::f16: reinterpret_cast<Half*>(base)[off] = Half(x); return;
    case DType::bf16: reinterpret_cast<BFloat16*>(base)[off] = BFloat16(x); return;
    case DType::i32: reinterpret_cast<int32_t*>(base)[off] = static_cast<int32_t>(x); return;
    case DType::i64: reinterpret_cast<int64_t*>(base)[off] = static_cast<int64_t>(x); return;
  }
}

inline void store_i64(const View& v, int64_t off, int64_t x) {
  char* base = static_cast<char*>(v.data);
  switch (v.dtype) {
    case DType::i32: reinterpret_cast<int32_t*>(base)[off] = static_cast<int32_t>(x); return;
    case DType::i64: reinterpret_cast<int64_t*>(base)[off] = x; return;
    default: store_f64(v, off, static_cast<double>(x)); return;
  }
}

// Writes `dense`, v.numel() values in row-major order of v.shape, into v: how kernels
// that accumulate into a contiguous double scratch buffer hand back their result.
inline void store_dense(const View& v, const std::vector<double>& dense) {
  for_each_offset(v.shape, [&](const auto& o) { store_f64(v, o[0], dense[o[1]]); },
                  v.strides, contiguous_strides(v.shape));
}

}  // namespace ringflow::strided
