#include "ringflow/framework/storage.h"

#include "ringflow/framework/dispatch.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes_ == 0) return;
  const DeviceScope scope(device_);
  data_ = device_backend(device_).allocate(nbytes_);
}

uint64_t Storage::fresh_version() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Storage::~Storage() {
  // The CUDA allocator finds a block's device by its pointer, whatever device is current.
  if (data_) device_backend(device_).deallocate(data_, nbytes_);
}

}  // namespace ringflow
