#include "ringflow/kernels/cpu/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

namespace ringflow {
namespace {

// Blocks from 1 MiB up are cached: the step-to-step working set of a training loop
// (activations, gradients) is the same set of sizes every iteration.
constexpr size_t kCacheThreshold = size_t{1} << 20;
constexpr size_t kAlignment = 64;

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;  // rounded size -> block
  CpuAllocatorStats stats;
  bool caching = true;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may outlive static destruction
  return *c;
}

size_t rounded(size_t nbytes) {
  if (nbytes < kCacheThreshold) return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  constexpr size_t kPage = size_t{1} << 16;
  return (nbytes + kPage - 1) / kPage * kPage;
}

void* system_allocate(size_t size) {
  void* p = std::aligned_alloc(kAlignment, std::max<size_t>(size, kAlignment));
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* cpu_allocate(size_t nbytes) {
  const size_t size = rounded(nbytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    c.stats.allocated += size;
    c.stats.peak_allocated = std::max(c.stats.peak_allocated, c.stats.allocated);
    if (size >= kCacheThreshold && c.caching) {
      // The most recently freed block of this size (equal keys keep insertion order): its
      // lines are the likeliest to be still in cache. Taking the oldest instead would
      // rotate a loop through every cached block of the size, each one cold.
      const auto [first, last] = c.free_blocks.equal_range(size);
      if (first != last) {
        const auto it = std::prev(last);
        void* p = it->second;
        c.free_blocks.erase(it);
        c.stats.cached -= size;
        return p;  // allocated + cached is unchanged
      }
    }
    if (size >= kCacheThreshold) ++c.stats.large_system_allocs;
    c.stats.peak_resident = std::max(c.stats.peak_resident, c.stats.allocated + c.stats.cached);
  }
  return system_allocate(size);
}

void cpu_deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = rounded(nbytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    c.stats.allocated -= size;
    if (size >= kCacheThreshold && c.caching) {
      c.free_blocks.emplace(size, ptr);
      c.stats.cached += size;
      return;
    }
  }
  std::free(ptr);
}

CpuAllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.stats;
}

void cpu_allocator_reset_peak() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  c.stats.peak_allocated = c.stats.allocated;
  c.stats.peak_resident = c.stats.allocated + c.stats.cached;
}

void cpu_allocator_release_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (auto& [size, p] : c.free_blocks) std::free(p);
  c.free_blocks.clear();
  c.stats.cached = 0;
}

void cpu_allocator_set_caching(bool on) {
  {
    std::lock_guard lock(cache().mutex);
    cache().caching = on;
  }
  if (!on) cpu_allocator_release_cache();
}

bool cpu_allocator_caching() {
  std::lock_guard lock(cache().mutex);
  return cache().caching;
}

}  // namespace ringflow
