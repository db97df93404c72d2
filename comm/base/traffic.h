// Traffic: the bytes one rank sends and receives in a collective, and the closed forms of
// each algorithm. The process group counts the bytes our allreduce algorithms actually move
// (MpiTransport) and models MPI's own collectives with the formulas here, so that DDP and
// the training app can report bytes per iteration, and tests can hold the counts against
// the theory (issue 5): for S bytes on n ranks,
//   ring                sent = received = 2(n-1)/n S (exactly: every chunk but two, each way)
//   naive (gather-      root: sent = received = (n-1) S, i.e. 2(n-1) S in all;
//          scatter)     other ranks: S each way
//   tree (binomial)     S each way per tree edge at the rank (children + parent)
//   recursive doubling  log2(p) S each way (p: the largest power of two <= n), plus S each
//                       way for the ranks that fold in and out when n is not a power of two
//   native (MPI's own)  modelled as bandwidth-optimal (2(n-1)/n S each way, what MPICH's
//                       reduce-scatter + allgather moves for large messages); not measured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ringflow/comm/base/types.h"

namespace ringflow::comm {

struct Traffic {
  int64_t sent = 0;      // bytes
  int64_t received = 0;  // bytes
  // True when counted as the bytes went (our algorithms, send/recv); false when modelled
  // (MPI's own collectives, whose algorithm MPI chooses).
  bool measured = false;

  Traffic& operator+=(const Traffic& o) {
    sent += o.sent;
    received += o.received;
    measured = measured || o.measured;
    return *this;
  }
};

// What `algo` moves at `rank` for an allreduce of `count` elements of `elem_bytes` bytes
// over `world` ranks (root: naive's). Exact for ours; Algorithm::automatic must be resolved
// first (choose_allreduce). measured is false.
Traffic allreduce_traffic(Algorithm algo, int64_t count, size_t elem_bytes, int world, int rank,
                          int root = 0);

// The hierarchical allreduce (hierarchical_allreduce.cpp) at `rank`, host_of[r] naming rank
// r's host: within the host straight to its first rank (the leader), the ring among the
// leaders, a binomial broadcast back within the host.
Traffic hierarchical_traffic(int64_t count, size_t elem_bytes, const std::vector<int>& host_of,
                             int rank);

// A binomial-tree broadcast of `bytes` from `root` (MPICH's choice for small and medium
// messages): every other rank receives the bytes once and sends them to each of its children.
Traffic broadcast_traffic(int64_t bytes, int world, int rank, int root);
// A binomial-tree reduce of `bytes` to `root`: the broadcast's tree traversed upwards.
Traffic reduce_traffic(int64_t bytes, int world, int rank, int root);
// A reduce to `root`, then a broadcast back: an allreduce made of a group's own collectives
// (over NCCL, where none of ours runs).
Traffic reduce_broadcast_traffic(int64_t bytes, int world, int rank, int root);

}  // namespace ringflow::comm
