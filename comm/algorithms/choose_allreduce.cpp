// The rule behind Algorithm::automatic. Small messages are latency-bound: recursive
// doubling needs log2(n) exchanges (+2 when n is not a power of two) against the ring's
// 2(n-1). Large messages are bandwidth-bound: the ring moves 2(n-1)/n of the buffer per
// rank against recursive doubling's log2(n) whole buffers. The crossover (8 KiB) was a
// first rule from 2-rank figures over MPI, and over ShmTransport it holds at 2 ranks
// (docs/allreduce.md). Revisit with bench/collectives where more cores are at hand.
#include "ringflow/comm/algorithms/allreduce.h"

namespace ringflow::comm {

inline constexpr size_t kRingFromBytes = 8 * 1024;

Algorithm choose_allreduce(size_t bytes, int world_size) {
  // At world size 1 (or 0 bytes) every algorithm of ours returns at once.
  if (world_size <= 1) return Algorithm::recursive_doubling;
  return bytes < kRingFromBytes ? Algorithm::recursive_doubling : Algorithm::ring;
}

}  // namespace ringflow::comm
