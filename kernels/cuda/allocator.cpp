// The CUDA backend's memory: one CachingAllocator per device (Note [Caching allocator
// policy] in kernels/caching_allocator.h) over cudaMalloc, cudaFree and CUDA events, and
// the API of kernels/cuda_memory.h. Blocks are allocated for the legacy default stream,
// where every kernel and copy runs (Note [CUDA streams] in cuda_kernels.h), so a freed
// block is reused by later work on that stream at once, without any synchronisation.
#include <array>
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/caching_allocator.h"
#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda_memory.h"

namespace ringflow {
namespace cuda {
namespace {

// RF_CHECK_CUDA for a status already in hand (where some codes are not errors).
void check(cudaError_t status, const char* call, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw_library_error("CUDA", call, __FILE__, line, static_cast<int>(status),
                      cudaGetErrorString(status));
}

// cudaMalloc and cudaFree are not stream work: a capture on this thread in CUDA's global or
// thread-local mode would refuse them as unsafe (CudaGraph captures relaxed; another
// library's capture may not), so the raw allocator's calls switch this thread to the relaxed
// mode meanwhile, as PyTorch's do.
class RelaxedCapture {
 public:
  RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// The raw side for one device. Every call makes that device current: cudaFree and event
// calls may come from a thread whose current device is another (a tensor freed there).
class CudaRawMemory final : public RawDeviceMemory {
 public:
  explicit CudaRawMemory(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    DeviceGuard on(device_);
    const RelaxedCapture relaxed;
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: the allocator empties its cache and retries
      return nullptr;
    }
    check(status, "cudaMalloc(&ptr, nbytes)", __LINE__);
    return ptr;
  }

  void free(void* ptr) override {
    DeviceGuard on(device_);
    const RelaxedCapture relaxed;
    RF_CHECK_CUDA(cudaFree(ptr));
  }

  EventHandle record_event(StreamHandle stream) override {
    DeviceGuard on(device_);
    cudaEvent_t event = nullptr;
    RF_CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    const cudaError_t status = cudaEventRecord(event, static_cast<cudaStream_t>(stream));
    if (status != cudaSuccess) (void)cudaEventDestroy(event);
    check(status, "cudaEventRecord(event, stream)", __LINE__);
    return event;
  }

  bool event_completed(EventHandle event) override {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check(status, "cudaEventQuery(event)", __LINE__);
    return true;
  }

  void synchronize_event(EventHandle event) override {
    RF_CHECK_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }

  void destroy_event(EventHandle event) override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  std::string describe() override {
    size_t free_bytes = 0, total_bytes = 0;
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device_) != cudaSuccess ||
        cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaSetDevice(previous);
      return {};
    }
    (void)cudaSetDevice(previous);
    return "cudaMemGetInfo: " + format_bytes(free_bytes) + " free of " +
           format_bytes(total_bytes) + " on the device";
  }

 private:
  int device_;
};

struct DeviceAllocator {
  explicit DeviceAllocator(int device)
      : raw(device), cache(raw, "cuda:" + std::to_string(device)) {}
  CudaRawMemory raw;
  CachingAllocator cache;
};

// Created on a device's first allocation and never destroyed: tensors may be freed during
// static destruction. Lookups are lock-free; creation takes the mutex.
constexpr int kMaxDevices = 64;
std::array<std::atomic<DeviceAllocator*>, kMaxDevices> g_allocators{};
std::mutex g_create_mutex;

DeviceAllocator* existing(int device) {
  return g_allocators[device].load(std::memory_order_acquire);
}

void check_index(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw std::invalid_argument("CUDA device index " + std::to_string(device) +
                                " out of range [0, " + std::to_string(kMaxDevices) + ")");
}

DeviceAllocator& allocator_of(int device) {
  check_index(device);
  if (DeviceAllocator* a = existing(device)) return *a;
  std::lock_guard lock(g_create_mutex);
  if (DeviceAllocator* a = existing(device)) return *a;
  auto* a = new DeviceAllocator(device);
  g_allocators[device].store(a, std::memory_order_release);
  return *a;
}

// The allocator that handed out ptr, or null.
DeviceAllocator* owner_of(const void* ptr) {
  for (int d = 0; d < kMaxDevices; ++d)
    if (DeviceAllocator* a = existing(d); a && a->cache.owns(ptr)) return a;
  return nullptr;
}

const StreamHandle kComputeStream = cudaStreamLegacy;

}  // namespace

uint64_t begin_private_pool(int device) { return allocator_of(device).cache.begin_private_pool(kComputeStream); }
void end_private_pool(int device) { allocator_of(device).cache.end_private_pool(kComputeStream); }
void release_private_pool(int device, uint64_t pool) { allocator_of(device).cache.release_private_pool(pool); }

void* allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  int device = 0;
  RF_CHECK_CUDA(cudaGetDevice(&device));
  return allocator_of(device).cache.allocate(nbytes, kComputeStream);
}

// Called from destructors (Storage, DeviceBuffer), so it must not throw: a failure is
// reported on stderr.
void deallocate(void* ptr, size_t /*nbytes*/) {
  if (!ptr) return;
  try {
    DeviceAllocator* owner = owner_of(ptr);
    if (!owner) {
      std::fprintf(stderr, "ringflow: CUDA deallocate(%p): not from the caching allocator\n", ptr);
      return;
    }
    owner->cache.free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringflow: CUDA deallocate(%p) failed: %s\n", ptr, e.what());
  }
}

}  // namespace cuda

CachingAllocatorStats cuda_memory_stats(int device) {
  cuda::check_index(device);
  const cuda::DeviceAllocator* a = cuda::existing(device);
  return a ? a->cache.stats() : CachingAllocatorStats{};
}

void cuda_reset_peak_memory_stats(int device) {
  cuda::check_index(device);
  if (cuda::DeviceAllocator* a = cuda::existing(device)) a->cache.reset_peak_stats();
}

void cuda_empty_cache() {
  for (int d = 0; d < cuda::kMaxDevices; ++d)
    if (cuda::DeviceAllocator* a = cuda::existing(d)) a->cache.empty_cache();
}

void cuda_record_stream(void* ptr, CudaStream stream) {
  cuda::DeviceAllocator* owner = cuda::owner_of(ptr);
  if (!owner)
    throw std::invalid_argument("cuda_record_stream: " +
                                std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                                " is not memory of the CUDA caching allocator");
  owner->cache.record_stream(ptr, stream ? stream : cudaStreamLegacy);
}

}  // namespace ringflow
