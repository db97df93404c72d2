// copy and fill on the current device: one grid-stride kernel per (dst dtype, src dtype)
// pair over an Indexer (strided.cuh), on the default stream (Note [CUDA streams] in
// cuda_kernels.h). Conversions follow the reference backend so that tests compare exactly:
// same dtype copies bits, integer -> integer goes through int64, anything else through
// double, with f16/bf16 rounded to nearest-even from float (as Half(double) does).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/strided.cuh"

namespace ringflow::cuda {
namespace {

// The device type stored for each DType (same size and bits as the host types).
template <class Fn>
void visit_device_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::f16: return fn(__half{});
    case DType::bf16: return fn(__nv_bfloat16{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
  }
  throw std::invalid_argument("cuda: unknown dtype");
}

__device__ inline double to_f64(float x) { return x; }
__device__ inline double to_f64(double x) { return x; }
__device__ inline double to_f64(__half x) { return __half2float(x); }
__device__ inline double to_f64(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline double to_f64(int32_t x) { return x; }
__device__ inline double to_f64(int64_t x) { return static_cast<double>(x); }

template <class T> __device__ inline T from_f64(double x);
template <> __device__ inline float from_f64<float>(double x) { return static_cast<float>(x); }
template <> __device__ inline double from_f64<double>(double x) { return x; }
template <> __device__ inline __half from_f64<__half>(double x) {
  return __float2half_rn(static_cast<float>(x));
}
template <> __device__ inline __nv_bfloat16 from_f64<__nv_bfloat16>(double x) {
  return __float2bfloat16_rn(static_cast<float>(x));
}
template <> __device__ inline int32_t from_f64<int32_t>(double x) { return static_cast<int32_t>(x); }
template <> __device__ inline int64_t from_f64<int64_t>(double x) { return static_cast<int64_t>(x); }

template <class To, class From>
__device__ inline To convert(From x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else if constexpr (std::is_integral_v<To> && std::is_integral_v<From>)
    return static_cast<To>(static_cast<int64_t>(x));
  else return from_f64<To>(to_f64(x));
}

template <class To, class From>
__global__ void copy_kernel(To* __restrict__ dst, const From* __restrict__ src, Indexer<2> ix) {
  const int64_t step = int64_t{blockDim.x} * gridDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < ix.numel; i += step) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[0]] = convert<To>(src[off[1]]);
  }
}

template <class T>
__global__ void fill_kernel(T* __restrict__ dst, double value, Indexer<1> ix) {
  const T v = from_f64<T>(value);
  const int64_t step = int64_t{blockDim.x} * gridDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < ix.numel; i += step) {
    int64_t off[1];
    ix.offsets(i, off);
    dst[off[0]] = v;
  }
}

}  // namespace

void copy(const View& dst, const View& src) {
  if (dst.shape != src.shape)
    throw std::invalid_argument("cuda copy: shape mismatch " + shape_str(dst.shape) + " vs " +
                                shape_str(src.shape));
  if (dst.numel() == 0) return;
  const Indexer<2> ix = make_indexer<2>({&dst, &src}, "copy");
  visit_device_dtype(dst.dtype, [&](auto to) {
    visit_device_dtype(src.dtype, [&](auto from) {
      using To = decltype(to);
      using From = decltype(from);
      copy_kernel<To, From><<<grid_for(ix.numel), kBlock, 0, /*stream=*/0>>>(
          dst.ptr<To>(), src.ptr<const From>(), ix);
      RF_CHECK_CUDA(cudaGetLastError());
    });
  });
}

void fill(const View& dst, double value) {
  if (dst.numel() == 0) return;
  const Indexer<1> ix = make_indexer<1>({&dst}, "fill");
  visit_device_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(ix.numel), kBlock, 0, /*stream=*/0>>>(dst.ptr<T>(), value, ix);
    RF_CHECK_CUDA(cudaGetLastError());
  });
}

}  // namespace ringflow::cuda
