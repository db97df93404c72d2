// Internal to comm/ (not installed): the allreduce algorithms' argument checks and a
// per-thread receive buffer reused from call to call, so that a large allreduce does not
// allocate (and, above glibc's 32 MiB mmap threshold, re-fault) its temporary each time;
// MPI's error texts for the transports and the process group.
#pragma once

#include <cstddef>
#include <string>

#include "comm/allreduce.h"

namespace ringflow::comm::detail {

// Throws std::invalid_argument naming `algorithm` for a negative count, a null pointer
// with a non-zero count, a root outside the group.
void check_args(const char* algorithm, const Transport& t, Buffer buf, int root = 0);

// At least `bytes` bytes, 64-byte aligned; valid until the next call on this thread.
// One user at a time per thread: an algorithm takes it once and calls no other algorithm
// while it holds it.
void* scratch(size_t bytes);

// Buffers of at least this many bytes do not stay in cache until their next use: half the
// last-level cache (sysconf), 16 MiB where that is unknown. Their last writes may bypass
// the cache (Transport::sendrecv_streaming).
size_t streaming_from_bytes();

// MPI's text for an error code.
std::string mpi_error_text(int code);

// Throws std::runtime_error "<who>: <call> failed: <MPI's text>" unless code is MPI_SUCCESS.
void check_mpi(int code, const char* who, const char* call);

}  // namespace ringflow::comm::detail
