// copy_between_devices for builds with CUDA: host <-> device and device <-> device.
// Views that are dense, of one dtype and laid out alike go in one cudaMemcpy; anything
// else (dtype conversion, gaps, broadcast, different layouts) is staged: converted on the
// host by the CPU backend, or gathered on the device by cuda::copy, around a dense copy.
// Host copies run on the default stream and synchronize it before returning (Note [CUDA
// streams] in cuda_kernels.h); cudaMemcpyPeer orders itself with both devices' work.
// Also the pinned host memory of cuda_copy.h (staging buffers for such copies).
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda_copy.h"

namespace ringflow {
namespace {

// One memcpy copies src into dst: same dtype, dense, same strides where size > 1.
bool memcpy_compatible(const View& dst, const View& src) {
  if (dst.dtype != src.dtype || !dst.is_dense() || !src.is_dense()) return false;
  for (int d = 0; d < dst.dim(); ++d)
    if (dst.shape[d] != 1 && dst.strides[d] != src.strides[d]) return false;
  return true;
}

size_t nbytes(const View& v) { return static_cast<size_t>(v.numel()) * dtype_size(v.dtype); }

// A view of `data` with v's shape and dtype `dtype`: v's own strides when v is dense
// (so that a memcpy to or from v is valid), contiguous ones otherwise.
View staging_view(void* data, const View& v, DType dtype) {
  View s;
  s.data = data;
  s.dtype = dtype;
  s.shape = v.shape;
  s.strides = v.is_dense() ? v.strides : contiguous_strides(v.shape);
  return s;
}

void memcpy_sync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  // On the compute stream: inside a CUDA graph's capture the synchronisation fails, as it
  // must (kernels/cuda_graph.h), rather than reading what the capture has not computed.
  RF_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, cuda::compute_stream()));
  RF_CHECK_CUDA(cudaStreamSynchronize(cuda::compute_stream()));
}

void host_to_device(const View& dst, int device, const View& src) {
  cuda::DeviceGuard guard(device);
  if (memcpy_compatible(dst, src)) {
    memcpy_sync(dst.data, src.data, nbytes(dst), cudaMemcpyHostToDevice);
    return;
  }
  // Convert and gather on the host into dst's dtype (and dst's layout when dst is dense).
  std::vector<std::byte> host(nbytes(dst));
  const View staged = staging_view(host.data(), dst, dst.dtype);
  cpu_backend().copy(staged, src);
  if (dst.is_dense()) {
    memcpy_sync(dst.data, host.data(), host.size(), cudaMemcpyHostToDevice);
    return;
  }
  cuda::DeviceBuffer temp(host.size());
  memcpy_sync(temp.data(), host.data(), host.size(), cudaMemcpyHostToDevice);
  View on_device = staged;
  on_device.data = temp.data();
  cuda::copy(dst, on_device);
  RF_CHECK_CUDA(cudaStreamSynchronize(cuda::compute_stream()));  // before temp is freed
}

void device_to_host(const View& dst, const View& src, int device) {
  cuda::DeviceGuard guard(device);
  if (memcpy_compatible(dst, src)) {
    memcpy_sync(dst.data, src.data, nbytes(dst), cudaMemcpyDeviceToHost);
    return;
  }
  // Bring src's elements over densely in src's dtype, then convert and scatter on the host.
  std::vector<std::byte> host(nbytes(src));
  const View staged = staging_view(host.data(), src, src.dtype);
  if (src.is_dense()) {
    memcpy_sync(host.data(), src.data, host.size(), cudaMemcpyDeviceToHost);
  } else {
    cuda::DeviceBuffer temp(host.size());
    View on_device = staged;
    on_device.data = temp.data();
    cuda::copy(on_device, src);
    memcpy_sync(host.data(), temp.data(), host.size(), cudaMemcpyDeviceToHost);
  }
  cpu_backend().copy(dst, staged);
}

void device_to_device(const View& dst, int dst_device, const View& src, int src_device) {
  if (memcpy_compatible(dst, src)) {
    RF_CHECK_CUDA(cudaMemcpyPeer(dst.data, dst_device, src.data, src_device, nbytes(dst)));
    return;
  }
  // Gather and convert into dst's dtype on the source device, copy densely, then scatter
  // on the destination device when dst is not dense itself. Each temp goes back to the
  // cache of its own device; cudaMemcpyPeer is ordered with all work on both devices, so
  // later work there that reuses a temp runs after the copy.
  const size_t bytes = nbytes(dst);
  cuda::DeviceGuard on_src_device(src_device);
  cuda::DeviceBuffer src_temp(bytes);
  const View on_src = staging_view(src_temp.data(), dst, dst.dtype);
  cuda::copy(on_src, src);
  if (dst.is_dense()) {
    RF_CHECK_CUDA(cudaMemcpyPeer(dst.data, dst_device, on_src.data, src_device, bytes));
    return;
  }
  cuda::DeviceGuard on_dst_device(dst_device);
  cuda::DeviceBuffer dst_temp(bytes);
  RF_CHECK_CUDA(cudaMemcpyPeer(dst_temp.data(), dst_device, on_src.data, src_device, bytes));
  View on_dst = on_src;
  on_dst.data = dst_temp.data();
  cuda::copy(dst, on_dst);
}

}  // namespace

void copy_between_devices(const View& dst, Device dst_device, const View& src,
                          Device src_device) {
  if (dst.shape != src.shape)
    throw std::invalid_argument("copy " + src_device.str() + " -> " + dst_device.str() +
                                ": shape mismatch " + shape_str(src.shape) + " vs " +
                                shape_str(dst.shape));
  if (dst.numel() == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) return cpu_backend().copy(dst, src);
  if (src_device.is_cpu()) return host_to_device(dst, dst_device.index, src);
  if (dst_device.is_cpu()) return device_to_host(dst, src, src_device.index);
  if (dst_device.index == src_device.index) {
    cuda::DeviceGuard guard(dst_device.index);
    return cuda::copy(dst, src);
  }
  device_to_device(dst, dst_device.index, src, src_device.index);
}

void* allocate_pinned_host(size_t nbytes) {
  void* ptr = nullptr;
  if (nbytes > 0) RF_CHECK_CUDA(cudaHostAlloc(&ptr, nbytes, cudaHostAllocPortable));
  return ptr;
}

void free_pinned_host(void* ptr) noexcept {
  if (!ptr) return;
  const cudaError_t status = cudaFreeHost(ptr);
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  if (status != cudaErrorCudartUnloading)
    std::fprintf(stderr, "ringflow: cudaFreeHost(%p) failed: %s (CUDA error %d)\n", ptr,
                 cudaGetErrorString(status), static_cast<int>(status));
}

PinnedStaging::~PinnedStaging() {
  if (event_) {
    (void)cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  }
  free_pinned_host(host_);
}

void PinnedStaging::wait() const {
  if (event_) RF_CHECK_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

void* PinnedStaging::host(size_t nbytes) {
  wait();
  if (nbytes > capacity_) {
    free_pinned_host(host_);
    host_ = nullptr;
    capacity_ = 0;
    host_ = allocate_pinned_host(nbytes);
    capacity_ = nbytes;
  }
  return host_;
}

void PinnedStaging::upload(void* device_dst, size_t nbytes, Device device) {
  if (!device.is_cuda() || nbytes > capacity_)
    throw std::invalid_argument("PinnedStaging::upload: " + std::to_string(nbytes) + " bytes to " +
                                device.str() + " from a buffer of " + std::to_string(capacity_));
  cuda::DeviceGuard guard(device.index);
  if (!event_) {
    cudaEvent_t e = nullptr;
    RF_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
  }
  RF_CHECK_CUDA(cudaMemcpyAsync(device_dst, host_, nbytes, cudaMemcpyHostToDevice, cuda::compute_stream()));
  RF_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), cuda::compute_stream()));
}

StreamEvent::~StreamEvent() {
  if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void StreamEvent::record(Device device) {
  cuda::DeviceGuard guard(device.index);
  if (event_ && device.index != device_) {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = nullptr;
  }
  if (!event_) {
    cudaEvent_t e = nullptr;
    RF_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
    device_ = device.index;
  }
  RF_CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), /*stream=*/0));
}

namespace {

// One copy stream per device, made on first use and kept (non-blocking: it does not
// synchronise with the legacy default stream).
cudaStream_t copy_stream(int device) {
  static std::mutex mutex;
  static auto* streams = new std::map<int, cudaStream_t>;  // never destroyed, as the handles
  std::lock_guard lock(mutex);
  if (const auto it = streams->find(device); it != streams->end()) return it->second;
  cudaStream_t s = nullptr;
  RF_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  streams->emplace(device, s);
  return s;
}

}  // namespace

void copy_after(const View& dst, Device dst_device, const View& src, Device src_device,
                const StreamEvent& after) {
  const bool to_host = dst_device.is_cpu() && src_device.is_cuda();
  const bool to_device = src_device.is_cpu() && dst_device.is_cuda();
  if ((!to_host && !to_device) || dst.shape != src.shape || !memcpy_compatible(dst, src))
    return copy_between_devices(dst, dst_device, src, src_device);
  if (dst.numel() == 0) return;
  const int device = to_host ? src_device.index : dst_device.index;
  cuda::DeviceGuard guard(device);
  const cudaStream_t stream = copy_stream(device);
  if (after.recorded()) RF_CHECK_CUDA(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(after.handle()), 0));
  RF_CHECK_CUDA(cudaMemcpyAsync(dst.data, src.data, nbytes(dst),
                                to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream));
  RF_CHECK_CUDA(cudaStreamSynchronize(stream));
}

}  // namespace ringflow
