// Internal to comm/ (not installed): a per-thread buffer reused from call to call, so that
// a large allreduce does not allocate (and, above glibc's 32 MiB mmap threshold, re-fault)
// its temporary each time, and the size from which a buffer no longer stays in cache.
#pragma once

#include <cstddef>

namespace ringflow::comm::detail {

// At least `bytes` bytes, 64-byte aligned; valid until the next call on this thread.
// One user at a time per thread: an algorithm takes it once and calls no other algorithm
// while it holds it.
void* scratch(size_t bytes);

// Buffers of at least this many bytes do not stay in cache until their next use: half the
// last-level cache (sysfs), 16 MiB where that is unknown. Their last writes may bypass
// the cache (Transport::sendrecv_streaming).
size_t streaming_from_bytes();

}  // namespace ringflow::comm::detail
