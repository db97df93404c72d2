// Host memory for tensors: 64-byte aligned; large blocks are cached and reused by size so
// that a training step does not hand big buffers back to the kernel and fault them in
// again (glibc unmaps blocks over 32 MiB on free). Thread-safe.
#pragma once

#include <cstddef>

namespace ringflow {

void* cpu_allocate(size_t nbytes);
void cpu_deallocate(void* ptr, size_t nbytes);

struct CpuAllocatorStats {
  size_t allocated = 0;      // bytes handed out now
  size_t cached = 0;         // bytes held in the cache, not handed out
  size_t peak_allocated = 0;
  size_t peak_resident = 0;  // of allocated + cached: what the process holds for tensors
  size_t large_system_allocs = 0;  // blocks of 1 MiB or more that the cache could not serve
};
CpuAllocatorStats cpu_allocator_stats();
void cpu_allocator_reset_peak();  // the peaks from now on: what is allocated (and cached) now
void cpu_allocator_release_cache();  // give cached blocks back to the system
// Caching is on by default. Turning it off releases the cache; large blocks then come from
// and go back to the system on every allocation, as with plain malloc (for A/B benchmarks).
void cpu_allocator_set_caching(bool on);
bool cpu_allocator_caching();

}  // namespace ringflow
