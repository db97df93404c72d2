// An (M, C) matrix read along its rows (C fastest in memory): each thread takes one column (or
// a pack of adjacent columns) of a chunk of rows, so that adjacent threads read adjacent
// elements; a second launch merges the chunks' partials per column. Batch norm over
// channels-last operands and column sums use it.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "ringflow/kernels/simt/simt.h"
#include "ringflow/kernels/view.h"

namespace ringflow::simt {

// Arrays of A from the executor's workspace for one op's launches, freed together (in stream
// order on the GPU) when it goes out of scope.
template <class Exec, class A>
class Scratch {
 public:
  A* take(int64_t n) {
    held_.push_back(Exec::workspace(sizeof(A) * static_cast<size_t>(n > 0 ? n : 1)));
    return static_cast<A*>(held_.back().get());
  }

 private:
  std::vector<Workspace> held_;
};

// x as (M, C) split into chunks of `chunk` rows, one thread per (chunk, channel).
struct ChannelChunks {
  int64_t M, C, chunk, chunks;
  RF_HD int64_t rows_in(int64_t p) const { return (p + 1) * chunk < M ? chunk : M - p * chunk; }
};

inline ChannelChunks channel_chunks(int64_t M, int64_t C) {
  // About 2^18 threads in phase 1 (enough to fill a large GPU), at least 16 rows each.
  constexpr int64_t kThreads = int64_t{1} << 18, kMinRows = 16;
  int64_t chunk = C == 0 ? M : (M * C + kThreads - 1) / kThreads;
  chunk = chunk < kMinRows ? kMinRows : chunk;
  return {M, C, chunk, M == 0 ? 0 : (M + chunk - 1) / chunk};
}

// Rows a thread loads before it uses them. Batch norm's first launch over rows read one element
// per thread at a time (2 bytes in 16-bit), by the split of its H100 timings in docs/cuda.md (an
// estimate) at about a third of the memory's rate. With a pack of columns and kRowsInFlight rows
// at a time a thread has 64 bytes in flight: four times the bytes of the whole grid before (the
// chunks are planned per column, so a V-th of the threads).
constexpr int kRowsInFlight = 4;

// fn(r, col[r * stride]) for rows r in [0, rows) of a column (a pointer to packs, or what
// reads several operands' packs at one index), the loads kRowsInFlight rows at a time.
template <class Col, class Fn>
RF_HD inline void for_rows(const Col& col, int64_t stride, int64_t rows, const Fn& fn) {
  using R = std::decay_t<decltype(col[0])>;
  int64_t r = 0;
  for (; r + kRowsInFlight <= rows; r += kRowsInFlight) {
    R v[kRowsInFlight];
    for (int u = 0; u < kRowsInFlight; ++u) v[u] = col[(r + u) * stride];
    for (int u = 0; u < kRowsInFlight; ++u) fn(r + u, v[u]);
  }
  for (; r < rows; ++r) {
    const R v = col[r * stride];  // one pack, as above
    fn(r, v);
  }
}

}  // namespace ringflow::simt
