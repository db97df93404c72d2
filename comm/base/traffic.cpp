// The closed forms of comm/base/traffic.h, written from each algorithm's schedule (the files
// named below), not from the counts: the tests compare the two.
#include "ringflow/comm/base/traffic.h"

#include <algorithm>

#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

// Children of virtual rank vr in the binomial tree rooted at 0 that tree_allreduce.cpp and
// MPICH's binomial broadcast use: vr + 2^k for every 2^k below vr's lowest set bit.
int binomial_children(int vr, int n) {
  int children = 0;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) break;
    if (vr + mask < n) ++children;
  }
  return children;
}

// ring_allreduce.cpp: rank r sends every chunk but r+1 in the reduce-scatter and every chunk
// but r+2 in the allgather; it receives every chunk but r, then every chunk but r+1.
Traffic ring(int64_t count, int64_t esize, int n, int r) {
  const int64_t base = count / n, extra = count % n;
  auto len = [&](int c) { c %= n; return base + (c < extra ? 1 : 0); };
  return {(2 * count - len(r + 1) - len(r + 2)) * esize, (2 * count - len(r) - len(r + 1)) * esize,
          false};
}

}  // namespace

Traffic allreduce_traffic(Algorithm algo, int64_t count, size_t elem_bytes, int world, int rank,
                          int root) {
  RF_CHECK(world >= 1 && rank >= 0 && rank < world && root >= 0 && root < world,
           "allreduce_traffic: rank ", rank, " root ", root, " in a world of ", world);
  RF_CHECK(count >= 0, "allreduce_traffic: negative count ", count);
  if (world == 1 || count == 0) return {};
  const int64_t esize = static_cast<int64_t>(elem_bytes);
  const int64_t s = count * esize;
  switch (algo) {
    case Algorithm::native:
    case Algorithm::ring:
      return ring(count, esize, world, rank);
    case Algorithm::naive:  // naive_allreduce.cpp
      return rank == root ? Traffic{(world - 1) * s, (world - 1) * s, false} : Traffic{s, s, false};
    case Algorithm::tree: {  // tree_allreduce.cpp: up and down every edge once
      const int64_t edges = binomial_children(rank, world) + (rank != 0 ? 1 : 0);
      return {edges * s, edges * s, false};
    }
    case Algorithm::recursive_doubling: {  // recursive_doubling_allreduce.cpp
      int pof2 = 1, rounds = 0;
      while (pof2 * 2 <= world) { pof2 *= 2; ++rounds; }
      const int rem = world - pof2;
      if (rank < 2 * rem && rank % 2 == 0) return {s, s, false};  // folds in, sits out
      const int64_t k = rounds + (rank < 2 * rem ? 1 : 0);
      return {k * s, k * s, false};
    }
    case Algorithm::automatic:
    case Algorithm::hierarchical:
      break;
  }
  throw std::invalid_argument(algo == Algorithm::automatic
                                  ? "allreduce_traffic: resolve Algorithm::automatic first "
                                    "(choose_allreduce)"
                                  : "allreduce_traffic: the hierarchical allreduce's depends on "
                                    "the hosts (hierarchical_traffic)");
}

Traffic hierarchical_traffic(int64_t count, size_t elem_bytes, const std::vector<int>& host_of,
                             int rank) {
  const int world = static_cast<int>(host_of.size());
  RF_CHECK(rank >= 0 && rank < world, "hierarchical_traffic: rank ", rank, " of ", world);
  if (world == 1 || count == 0) return {};
  const int64_t s = count * static_cast<int64_t>(elem_bytes);
  std::vector<int> mine, leaders;  // my host's ranks; the first rank of every host
  for (int r = 0; r < world; ++r) {
    if (host_of[r] == host_of[rank]) mine.push_back(r);
    bool first = true;
    for (int q = 0; q < r && first; ++q) first = host_of[q] != host_of[r];
    if (first) leaders.push_back(r);
  }
  const int k = static_cast<int>(mine.size());
  const int pos = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  Traffic t = pos == 0 ? Traffic{0, (k - 1) * s, false} : Traffic{s, 0, false};  // reduce
  if (pos == 0 && leaders.size() > 1) {
    const int li = static_cast<int>(std::find(leaders.begin(), leaders.end(), rank) - leaders.begin());
    t += ring(count, static_cast<int64_t>(elem_bytes), static_cast<int>(leaders.size()), li);
  }
  t += broadcast_traffic(s, k, pos, 0);
  return t;
}

Traffic broadcast_traffic(int64_t bytes, int world, int rank, int root) {
  RF_CHECK(world >= 1 && rank >= 0 && rank < world && root >= 0 && root < world,
           "broadcast_traffic: rank ", rank, " root ", root, " in a world of ", world);
  if (world == 1 || bytes == 0) return {};
  const int vr = (rank - root + world) % world;
  return {binomial_children(vr, world) * bytes, vr != 0 ? bytes : 0, false};
}

Traffic reduce_traffic(int64_t bytes, int world, int rank, int root) {
  const Traffic down = broadcast_traffic(bytes, world, rank, root);
  return {down.received, down.sent, false};
}

Traffic reduce_broadcast_traffic(int64_t bytes, int world, int rank, int root) {
  Traffic t = reduce_traffic(bytes, world, rank, root);
  t += broadcast_traffic(bytes, world, rank, root);
  return t;
}

}  // namespace ringflow::comm
