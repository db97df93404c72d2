#include "ringflow/framework/storage.h"

#include <utility>

#include "ringflow/framework/dispatch.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes_ == 0) return;
  const DeviceScope scope(device_);
  data_ = device_backend(device_).allocate(nbytes_);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void()> release)
    : data_(data), nbytes_(nbytes), device_(device), borrowed_(true), release_(std::move(release)), shared_(true) {}

uint64_t Storage::fresh_version() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Storage::~Storage() {
  // The CUDA allocator finds a block's device by its pointer, whatever device is current.
  if (borrowed_) {
    if (release_) release_();
  } else if (data_) {
    device_backend(device_).deallocate(data_, nbytes_);
  }
}

}  // namespace ringflow
