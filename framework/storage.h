// A block of memory on one device, shared by every tensor that views it. The version
// counts writes through tensors (in-place ops), so kernels can cache data derived from
// it (reordered weights) and know when it went stale.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ringflow/kernels/derived_cache.h"
#include "ringflow/kernels/device.h"

namespace ringflow {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.store(fresh_version(), std::memory_order_relaxed); }
  DerivedCache& derived() const { return derived_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  // Versions come from one process-wide counter, never reused: whatever keeps data derived
  // from a View by (data pointer, version) outside its Storage must not mistake a new
  // Storage at a freed address for the old.
  static uint64_t fresh_version();
  std::atomic<uint64_t> version_{fresh_version()};
  mutable DerivedCache derived_;
};

}  // namespace ringflow
