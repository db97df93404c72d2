// An (M, C) matrix read along its rows (C fastest in memory): each thread takes one column of
// a chunk of rows, so that adjacent threads read adjacent elements; a second launch merges the
// chunks' partials per column. Batch norm over channels-last operands and column sums use it.
#pragma once

#include <cstdint>
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

}  // namespace ringflow::simt
