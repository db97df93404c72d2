// The rule behind Algorithm::automatic. Small messages are latency-bound: recursive
// doubling needs log2(n) exchanges (+2 when n is not a power of two) against the ring's
// 2(n-1). Large messages are bandwidth-bound: the ring moves 2(n-1)/n of the buffer per
// rank against recursive doubling's log2(n) whole buffers. The crossover (8 KiB) was a
// first rule from the 2-rank figures of issue 4 (over MPI); over ShmTransport it holds:
// at 2 ranks (bench/collectives, 3 runs) the ring takes 1.2-1.8x recursive doubling's time
// at 1-4 KB (0.5-0.8 against 0.3-0.7 us), 0.8-1.4x at 8 KB, 0.8-0.9x at 16-32 KB, 0.9-1.1x
// at 64 KB and 0.65-0.75x from 128 KB. Revisit with bench/collectives where more cores are
// at hand.
#include "ringflow/comm/algorithms/allreduce.h"

namespace ringflow::comm {

inline constexpr size_t kRingFromBytes = 8 * 1024;

Algorithm choose_allreduce(size_t bytes, int world_size) {
  // At world size 1 (or 0 bytes) every algorithm of ours returns at once.
  if (world_size <= 1) return Algorithm::recursive_doubling;
  return bytes < kRingFromBytes ? Algorithm::recursive_doubling : Algorithm::ring;
}

}  // namespace ringflow::comm
