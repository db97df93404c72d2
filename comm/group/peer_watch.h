// PeerWatch: which ranks of a group run on this node, and whether their processes still
// do. A group whose collectives wait in a library that never hears of a dead peer (MPI's
// own collectives) asks it while waiting, so that a killed rank on this node is named in
// about 100 ms rather than at the collective's timeout.
#pragma once

#include <string>
#include <vector>

#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

class PeerWatch {
 public:
  // Collective over the bootstrap's ranks.
  explicit PeerWatch(Bootstrap& bootstrap);
  // "rank 2 (process 4711)" for the first rank of this node whose process has exited;
  // empty while all run. Ranks on other nodes are not watched.
  std::string dead_peer() const;

 private:
  struct Peer {
    int rank;
    int pid;
  };
  std::vector<Peer> local_;  // the other ranks of this node
};

}  // namespace ringflow::comm
