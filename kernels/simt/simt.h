// The CUDA backend's own kernels are written once, in headers that both nvcc and the host
// compiler read: a kernel body is a struct whose RF_HD operator() works on one element (or
// one block's row), launched by an executor. DeviceExec (kernels/cuda/device_exec.cuh) runs
// it on the GPU; HostExec (host_exec.h) runs the same body over the same launch grid on the
// CPU, so CI checks every kernel against the reference backend without a GPU.
// This header holds what every body needs: RF_HD, element loads and stores through an
// accumulation type, and the math functions on both sides.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "ringflow/kernels/dtype.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define RF_HD __host__ __device__
#else
#define RF_HD
#endif

namespace ringflow::simt {

// Threads per block of every launch. A power of two: block reductions halve it.
constexpr int kBlock = 256;
// Most blocks in a grid; larger problems loop (grid-stride).
constexpr int64_t kMaxBlocks = 65535;

// Blocks for a grid-stride loop over n elements, kBlock threads each.
RF_HD inline int64_t blocks_for(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b);
}
// Blocks for one block per row.
RF_HD inline int64_t blocks_for_rows(int64_t rows) {
  return rows < 1 ? 1 : (rows > kMaxBlocks ? kMaxBlocks : rows);
}

// Arithmetic type of each stored type: float for f32/f16/bf16, double for f64, int64 for ints.
template <class T> struct AccOf { using type = T; };
template <> struct AccOf<Half> { using type = float; };
template <> struct AccOf<BFloat16> { using type = float; };
template <> struct AccOf<int32_t> { using type = int64_t; };
template <class T> using acc_t = typename AccOf<T>::type;

template <class T> constexpr bool is_float_v = !std::numeric_limits<T>::is_integer;

// V adjacent elements of T read or written as one aligned access: a GPU thread moving 2 bytes
// per access leaves most of each memory transaction unused. kPack<T> elements make 16 bytes.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T e[V];
};
template <class T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

// Whether `divisor` (what a pack's length must divide: a row's channels, a plane's elements)
// and every pointer given allow packs of kPack<T> (null pointers aside).
template <class T>
bool packs_fit(int64_t divisor, std::initializer_list<const void*> pointers) {
  bool packs = divisor % kPack<T> == 0;
  for (const void* p : pointers) packs = packs && reinterpret_cast<uintptr_t>(p) % sizeof(Pack<T, kPack<T>>) == 0;
  return packs;
}
// launch(std::integral_constant<int, V>{}): V = kPack<T> where packs_fit, else 1.
template <class T, class Launch>
void with_pack(int64_t divisor, std::initializer_list<const void*> pointers, const Launch& launch) {
  if (packs_fit<T>(divisor, pointers)) launch(std::integral_constant<int, kPack<T>>{});
  else launch(std::integral_constant<int, 1>{});
}

// Stored value -> its accumulation type.
RF_HD inline float load(float x) { return x; }
RF_HD inline double load(double x) { return x; }
RF_HD inline int64_t load(int32_t x) { return x; }
RF_HD inline int64_t load(int64_t x) { return x; }
RF_HD inline float load(Half x) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(x.bits));
#else
  return half_bits_to_float(x.bits);
#endif
}
RF_HD inline float load(BFloat16 x) {
#if defined(__CUDA_ARCH__)
  return __bfloat162float(__ushort_as_bfloat16(x.bits));
#else
  return bf16_bits_to_float(x.bits);
#endif
}

// Any arithmetic value -> stored type T, rounding to nearest even for f16/bf16 (from float,
// as the reference's Half(double) does) and truncating toward zero for integers.
template <class T, class V>
RF_HD inline T store(V v) {
  if constexpr (std::is_same_v<T, Half>) {
    Half h;
#if defined(__CUDA_ARCH__)
    h.bits = __half_as_ushort(__float2half_rn(static_cast<float>(v)));
#else
    h.bits = float_to_half_bits(static_cast<float>(v));
#endif
    return h;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 h;
#if defined(__CUDA_ARCH__)
    h.bits = __bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)));
#else
    h.bits = float_to_bf16_bits(static_cast<float>(v));
#endif
    return h;
  } else {
    return static_cast<T>(v);
  }
}

// Math on float and double, the same names on both sides.
#if defined(__CUDA_ARCH__)
#define RF_SIMT_MATH1(name, fname)                                  \
  RF_HD inline float name(float x) { return ::fname(x); }           \
  RF_HD inline double name(double x) { return ::name(x); }
#else
#define RF_SIMT_MATH1(name, fname)                                  \
  RF_HD inline float name(float x) { return std::name(x); }         \
  RF_HD inline double name(double x) { return std::name(x); }
#endif
RF_SIMT_MATH1(exp, expf)
RF_SIMT_MATH1(log, logf)
RF_SIMT_MATH1(sqrt, sqrtf)
RF_SIMT_MATH1(tanh, tanhf)
RF_SIMT_MATH1(fabs, fabsf)
#undef RF_SIMT_MATH1

#if defined(__CUDA_ARCH__)
RF_HD inline float pow(float a, float b) { return ::powf(a, b); }
RF_HD inline double pow(double a, double b) { return ::pow(a, b); }
#else
RF_HD inline float pow(float a, float b) { return std::pow(a, b); }
RF_HD inline double pow(double a, double b) { return std::pow(a, b); }
#endif

template <class T> RF_HD inline bool isnan(T x) {
  if constexpr (is_float_v<T>) return x != x;
  else return false;
}
template <class T> RF_HD inline T quiet_nan() {
  if constexpr (is_float_v<T>) return std::numeric_limits<T>::quiet_NaN();
  else return T{0};
}
template <class T> RF_HD inline T lowest() {
  if constexpr (is_float_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::min();
}
template <class T> RF_HD inline T highest() {
  if constexpr (is_float_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

// *p += v, atomically on the device (blocks may race), plainly on the host (HostExec runs
// one thread at a time).
template <class T, class V>
RF_HD inline void atomic_add(T* p, V v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) atomicAdd(p, static_cast<float>(v));
  else if constexpr (std::is_same_v<T, double>) atomicAdd(p, static_cast<double>(v));
  else if constexpr (std::is_same_v<T, Half>)
    atomicAdd(reinterpret_cast<__half*>(p), __float2half_rn(static_cast<float>(v)));
  else if constexpr (std::is_same_v<T, BFloat16>)
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __float2bfloat16_rn(static_cast<float>(v)));
  else if constexpr (std::is_same_v<T, int32_t>) atomicAdd(p, static_cast<int32_t>(v));
  else
    atomicAdd(reinterpret_cast<unsigned long long*>(p),
              static_cast<unsigned long long>(static_cast<int64_t>(v)));
#else
  *p = store<T>(load(*p) + v);
#endif
}

}  // namespace ringflow::simt
