// A block of memory on one device, shared by every tensor that views it. The version
// counts writes through tensors (in-place ops), so kernels can cache data derived from
// it (reordered weights) and know when it went stale.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "ringflow/kernels/derived_cache.h"
#include "ringflow/kernels/device.h"

namespace ringflow {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Memory that something else owns (a NumPy array, another framework's tensor through
  // DLPack): no copy; `release` (may be empty) runs instead of the device's deallocate once
  // no tensor uses the storage any more. It must not throw.
  Storage(void* data, size_t nbytes, Device device, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.store(fresh_version(), std::memory_order_relaxed); }
  DerivedCache& derived() const { return derived_; }
  // Memory that others may write behind ringflow's back, without bumping the version
  // (borrowed, or handed to NumPy or DLPack): kernels must keep nothing derived from it.
  bool shared() const { return shared_.load(std::memory_order_relaxed); }
  void mark_shared() { shared_.store(true, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool borrowed_ = false;          // memory owned elsewhere: release_, never deallocate
  std::function<void()> release_;
  std::atomic<bool> shared_{false};
  // Versions come from one process-wide counter, never reused: whatever keeps data derived
  // from a View by (data pointer, version) outside its Storage must not mistake a new
  // Storage at a freed address for the old.
  static uint64_t fresh_version();
  std::atomic<uint64_t> version_{fresh_version()};
  mutable DerivedCache derived_;
};

}  // namespace ringflow
