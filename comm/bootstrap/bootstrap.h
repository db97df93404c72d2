// Bootstrap: what the ranks of a group tell each other before they can talk (which node
// each is on, the names of shared segments, listening addresses, NCCL's unique id): small
// blobs, exchanged a few times at start-up. Over MPI (MpiBootstrap) or over TCP to a
// rendezvous at MASTER_ADDR:MASTER_PORT (TcpBootstrap, as torchrun's store), so that a
// group of our own algorithms, or NCCL, needs no MPI.
#pragma once

#include <string>
#include <vector>

namespace ringflow::comm {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every rank's blob (of any length), in rank order. Throws naming the rank
  // that did not take part in time.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;

  // Collective: root's blob, on every rank.
  std::string broadcast(const std::string& blob, int root);
  void barrier() { allgather({}); }
};

// What identifies this process's node: ranks with equal identities can share memory. The
// host name and the network namespace, so that the emulated cluster's hosts (one namespace
// each, bench/cluster) count as different nodes.
std::string node_identity();

// The position of `rank` among the ranks whose identity equals its own, and their count.
struct NodeRanks {
  int local_rank = 0;
  int local_size = 1;
};
NodeRanks node_ranks(const std::vector<std::string>& identities, int rank);
// Each rank's host as a small number (hosts numbered by their first rank), from every
// rank's node_identity().
std::vector<int> host_indices(const std::vector<std::string>& identities);

}  // namespace ringflow::comm
