// Internal to comm/ (not installed): one TCP connection between this rank and each peer it
// names, made collectively through a Bootstrap (which carries only the addresses). The TCP
// transport moves its messages over a mesh of every pair; PeerWatch holds one to each rank
// of other nodes and learns of their exit when the connection closes.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

struct TcpMesh {
  std::vector<Fd> fds;  // fds[peer]: the connection to peer; invalid where not linked
  std::string address;  // "10.77.0.1:40123": where this rank listened
};

// Collective over the bootstrap's ranks: connects this rank with every peer q where
// linked[q]. linked must agree across ranks (q links r exactly when r links q). Listens on
// `interface` as TcpTransportOptions::interface says; connecting waits at most
// setup_timeout. nullopt on every rank when any rank could not listen or connect, with the
// first failing rank's reason in *why_not (when given), naming the rank and the address.
std::optional<TcpMesh> connect_mesh(Bootstrap& bootstrap, const std::vector<bool>& linked,
                                    const std::string& interface,
                                    std::chrono::milliseconds setup_timeout,
                                    std::string* why_not);

}  // namespace ringflow::comm
