// The arithmetic of every allreduce: dst (op)= src, element by element, and the final
// division of ReduceOp::avg. f16/bf16 are converted to f32 for each operation and rounded
// back (nearest-even), so every addition happens in f32. The f32 sum is the hot loop of
// the ring's reduce-scatter: a plain restrict loop the compiler vectorises, cloned for
// AVX2 and AVX-512 where GCC can pick the clone at load time.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <type_traits>

#include "ringflow/comm/base/reduce.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__)
#define RF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RF_CLONES
#endif

RF_CLONES void sum_f32(float* __restrict dst, const float* __restrict src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
}

template <class T>
void reduce_direct(T* __restrict dst, const T* __restrict src, int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
      return;
    case ReduceOp::max:
      for (int64_t i = 0; i < count; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
      return;
    case ReduceOp::min:
      for (int64_t i = 0; i < count; ++i) dst[i] = src[i] < dst[i] ? src[i] : dst[i];
      return;
  }
}

// T is Half or BFloat16: each operation in f32, rounded back once.
template <class T>
void reduce_via_float(T* __restrict dst, const T* __restrict src, int64_t count, ReduceOp op) {
  for (int64_t i = 0; i < count; ++i) {
    float a = dst[i], b = src[i];
    float r = op == ReduceOp::max   ? (b > a ? b : a)
              : op == ReduceOp::min ? (b < a ? b : a)
                                    : a + b;
    dst[i] = T(r);
  }
}

}  // namespace

void reduce_into(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op) {
  RF_CHECK(count >= 0, "reduce_into: negative count ", count);
  if (count == 0) return;
  if (dtype == DType::f32 && (op == ReduceOp::sum || op == ReduceOp::avg)) {
    sum_f32(static_cast<float*>(dst), static_cast<const float*>(src), count);
    return;
  }
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      reduce_via_float(static_cast<T*>(dst), static_cast<const T*>(src), count, op);
    } else {
      reduce_direct(static_cast<T*>(dst), static_cast<const T*>(src), count, op);
    }
  });
}

void finish_average(Buffer buf, int world_size) {
  RF_CHECK(world_size >= 1, "finish_average: world size ", world_size, " < 1");
  if (world_size == 1 || buf.count == 0) return;
  visit_dtype(buf.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* data = static_cast<T*>(buf.data);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const float n = static_cast<float>(world_size);
      for (int64_t i = 0; i < buf.count; ++i) data[i] = T(static_cast<float>(data[i]) / n);
    } else {
      // Integers truncate toward zero, as C++ division does.
      const T n = static_cast<T>(world_size);
      for (int64_t i = 0; i < buf.count; ++i) data[i] = data[i] / n;
    }
  });
}

}  // namespace ringflow::comm
