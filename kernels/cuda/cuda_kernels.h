// Internals of the CUDA backend shared by kernels/cuda/ (not installed).
//
// Note [CUDA streams]: for now every kernel and copy runs on the legacy default stream
// (stream 0) of the calling thread's current device. Kernels are asynchronous to the
// host; any copy that reads or writes host memory synchronizes the stream before it
// returns, so host buffers may be reused (or read) at once. allocate uses the current
// device too (cudaSetDevice), through its caching allocator, whose blocks belong to the
// legacy default stream: work queued after a free may reuse the block at once. Memory that
// other streams use must be marked with cuda_record_stream (kernels/cuda_memory.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/view.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*, without the CUDA headers here

namespace ringflow::cuda {

// simt_*.cu: the kernels of kernels/simt/ (elementwise, reductions, softmax, gather and
// scatter_add, pooling, batch norm, fused optimizer steps) put into a table, run by DeviceExec. copy and fill also
// serve the rest of the backend (staging, temporaries).
void set_elementwise_kernels(Backend& b);
void set_reduce_kernels(Backend& b);
void set_softmax_kernels(Backend& b);
void set_index_kernels(Backend& b);
void set_pool_kernels(Backend& b);
void set_batch_norm_kernels(Backend& b);
// Per channel, the biased variance from cuDNN's 1 / sqrt(var + eps) (to_var) or back.
void batch_norm_convert_stats(const View& out, const View& in, double eps, bool to_var);
// y = relu(y + residual) in place (residual may be null): the fused forms' tail after cuDNN.
void batch_norm_add_relu(const View& y, const View* residual);
// cudnn_batch_norm.cpp, in builds with cuDNN: training batch norm on cuDNN where it can take
// the operands, the own kernels that `b` holds for the rest.
void use_cudnn_batch_norm(Backend& b);
// cuDNN's version as the loaded library reports it ("9.19.0"), or that the build has none
// (cudnn_handle.cpp, no_cudnn.cpp).
std::string cudnn_version();
void set_optimizer_kernels(Backend& b);
void copy(const View& dst, const View& src);
void fill(const View& dst, double value);

// matmul.cpp: out (B, M, N) = a (B, M, K) @ b (B, K, N) on cuBLAS, f32, f64, f16 and bf16
// (f32 accumulation), any strides (batch stride 0 broadcasts); integers throw
// std::invalid_argument.
void matmul(const View& out, const View& a, const View& b);
// The same with TF32 allowed for f32 as `tf32` says (a caller that read allow_tf32() once).
void matmul(const View& out, const View& a, const View& b, bool tf32);
// out (M, N) = a @ b + bias (then relu) in one cuBLASLt call with the BIAS / RELU_BIAS
// epilogue (f32, f16, bf16); composed of matmul, add and relu where cuBLASLt has no algorithm
// for it, for f64, and for operands without a GEMM layout.
void matmul_bias(const View& out, const View& a, const View& b, const View& bias, bool relu);

// The conv entries: cuDNN's (cudnn_conv.cpp) in a build with cuDNN, else the direct
// kernels of kernels/simt/conv.h (simt_conv.cu). Meson builds one of the two.
void set_conv_kernels(Backend& b);

// allocator.cpp: the caching allocator of the current device, for the legacy default
// stream. deallocate never throws (a failure is reported on stderr); nbytes is not needed.
void* allocate(size_t nbytes);
void deallocate(void* ptr, size_t nbytes);
// The device's allocator's private pool for a CUDA graph's capture (Note [Private pools for
// CUDA graphs] in caching_allocator.h): opened, closed after the capture, released with the
// graph.
uint64_t begin_private_pool(int device);
void end_private_pool(int device);
void release_private_pool(int device, uint64_t pool);

// cuda_graph.cpp: the stream this thread's kernels, copies, cuBLAS and cuDNN calls go to:
// the legacy default stream, or a capturing CUDA graph's (kernels/cuda_graph.h).
CUstream_st* compute_stream();

// Makes `index` the current device for its lifetime, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Scratch memory on the current device, back to the cache on destruction (staging for copies).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t nbytes) : data_(allocate(nbytes)) {}
  ~DeviceBuffer() { deallocate(data_, 0); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_;
};

// A buffer (not filled) for the elements of `dense`, a view whose strides lay its shape out
// densely (dense_layout, cudnn_conv_plan.h): `dense` pointing into it.
inline View allocate_for(View dense, std::optional<DeviceBuffer>& buffer) {
  buffer.emplace(static_cast<size_t>(std::max<int64_t>(dense.numel(), 1)) * dtype_size(dense.dtype));
  dense.data = buffer->data();
  return dense;
}

}  // namespace ringflow::cuda
