#include "ringflow/comm/group/peer_watch.h"

#include <unistd.h>

#include <cstdlib>

#include "ringflow/comm/base/process.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

PeerWatch::PeerWatch(Bootstrap& bootstrap) {
  const std::string me = node_identity();
  const std::vector<std::string> all = bootstrap.allgather(me + "\n" + std::to_string(::getpid()));
  for (int q = 0; q < bootstrap.size(); ++q) {
    const size_t cut = all[q].rfind('\n');
    if (q == bootstrap.rank() || cut == std::string::npos || all[q].substr(0, cut) != me) continue;
    local_.push_back({q, std::atoi(all[q].c_str() + cut + 1)});
  }
}

std::string PeerWatch::dead_peer() const {
  for (const Peer& p : local_) {
    if (!process_alive(p.pid)) return cat("rank ", p.rank, " (process ", p.pid, ")");
  }
  return "";
}

}  // namespace ringflow::comm
