// PeerWatch: whether the other ranks of a group still run. Ranks of this node are looked
// up by process id; each rank of another node holds a TCP connection to this one that
// carries nothing but a goodbye, so that its closing without one means the process exited
// (and TCP keepalive fails it within seconds when the host vanishes). Groups ask while
// waiting in a library that never hears of a dead peer (MPI's own collectives) and after a
// collective failed, to name the rank whose exit started the failure.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

class PeerWatch {
 public:
  // Collective over the bootstrap's ranks. Ranks of other nodes are watched through
  // connections on `interface` (as TcpTransportOptions::interface), made within
  // setup_timeout; where those cannot be made they are not watched, and unwatched() says why.
  explicit PeerWatch(Bootstrap& bootstrap, const std::string& interface = "",
                     std::chrono::milliseconds setup_timeout = std::chrono::seconds(30));
  // Says goodbye to the ranks of other nodes: this rank left, it did not die.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // "rank 2 (process 4711) has exited" for each watched rank whose process is gone ("rank 2
  // (process 4711 on node-b) has exited" for another node's; "... is unreachable: <why>"
  // where its link failed, e.g. keepalive timed out), joined by "; "; empty while all run.
  // Not thread-safe: one thread asks (a group's communication thread).
  std::string dead_peers();
  // Why the ranks of other nodes are not watched; empty when they are (or there are none).
  const std::string& unwatched() const { return unwatched_; }
  // Whether dead_peers() has named a rank (what it found is kept; nothing is looked at anew).
  bool saw_death() const;

 private:
  struct Peer {
    int rank = 0;
    int pid = 0;
    std::string host;  // empty on this node
    Fd link;           // to a rank of another node; invalid on this node or unwatched
    std::string dead;   // how it ended: "has exited", "is unreachable: ..."; empty while it runs
    bool left = false;  // said goodbye: no longer watched
  };
  // How p's link ended ("has exited", "is unreachable: ..."); empty while open.
  static std::string link_ended(Peer& p);

  std::vector<Peer> peers_;  // every other rank
  std::string unwatched_;
};

}  // namespace ringflow::comm
