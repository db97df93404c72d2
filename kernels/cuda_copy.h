// Copies between the host and CUDA devices (and between devices). Implemented by
// kernels/cuda/ when built with CUDA; kernels/no_cuda.cpp throws otherwise.
#pragma once

#include <cstddef>
#include <stdexcept>

#include "ringflow/kernels/device.h"
#include "ringflow/kernels/view.h"

namespace ringflow {

// dst = src for views of the same shape on different devices (or both on one CUDA device),
// converting dtype, any strides (0 broadcasts in src). Dense views of one dtype and layout
// go in one cudaMemcpy; anything else is staged through a temporary buffer. When either
// side is the host the copy has finished when this returns (Note [CUDA streams] in
// kernels/cuda/cuda_kernels.h). Throws std::invalid_argument on a shape mismatch and
// std::runtime_error on a CUDA failure or in a build without CUDA.
void copy_between_devices(const View& dst, Device dst_device, const View& src, Device src_device);

// Page-locked ("pinned") host memory, usable from every device (cudaHostAlloc with
// cudaHostAllocPortable): copies between it and a device run at the link's full speed,
// without the driver's bounce through its own pinned buffers. Slow to allocate and to free
// (cudaFreeHost waits for the device), so keep such a buffer for long and reuse it, as the
// MPI process group does with its staging area. nbytes 0 gives null. Throws
// std::runtime_error on a CUDA failure and in a build without CUDA.
void* allocate_pinned_host(size_t nbytes);
// Frees what allocate_pinned_host returned (null: nothing). Never throws: a failure is
// reported on stderr (none during process exit, when the CUDA runtime is unloading).
void free_pinned_host(void* ptr) noexcept;

// A reusable page-locked host buffer for copies to a CUDA device that do not wait: fill
// host(n), then upload() queues the copy on the device's compute stream (kernels queued
// after it see the data) and returns at once; the next host() waits for that copy to have
// read the buffer before handing it out again. Two of them, alternating, let the host
// prepare one batch while the other is still on its way. Throws std::runtime_error on a
// CUDA failure and in a build without CUDA.
class PinnedStaging {
 public:
  PinnedStaging() = default;
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  void* host(size_t nbytes);  // at least nbytes, once the previous upload has left it
  void upload(void* device_dst, size_t nbytes, Device device);

 private:
  void wait() const;
  void* host_ = nullptr;
  size_t capacity_ = 0;
  void* event_ = nullptr;  // cudaEvent_t of the last upload; null before the first
};

// What a CUDA device's compute stream has queued up to record(): work on other streams (or
// threads) can start after it without waiting for what is queued there later.
class StreamEvent {
 public:
  StreamEvent() = default;
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  void record(Device device);  // on device's compute stream; throws std::runtime_error
  bool recorded() const { return event_ != nullptr; }
  Device device() const { return Device::cuda(device_); }
  void* handle() const { return event_; }  // cudaEvent_t

 private:
  void* event_ = nullptr;
  int device_ = 0;
};

// copy_between_devices between one CUDA device and the host, on a copy stream of that
// device's own, after `after` (recorded on the compute stream when src was ready; ignored
// when not recorded): kernels queued on the compute stream since then go on meanwhile, as
// backward does while a gradient bucket is copied out for an MPI allreduce. Returns once the
// copy is done. Views that are not dense of one dtype and layout go through
// copy_between_devices (on the compute stream) instead.
void copy_after(const View& dst, Device dst_device, const View& src, Device src_device,
                const StreamEvent& after);

}  // namespace ringflow
