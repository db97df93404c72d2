// The one choice of what our algorithms talk through, made once per group: shared memory
// when every rank is on this node, shared memory within each host and TCP across hosts when
// some host has several ranks (HybridTransport), TCP when every rank is alone on its host;
// or the kind asked for. Used by the process groups and bench/collectives alike.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/transport/shm_transport.h"
#include "ringflow/comm/transport/tcp_transport.h"

namespace ringflow::comm {

enum class TransportKind { automatic, shm, hybrid, tcp };

const char* transport_kind_name(TransportKind kind);  // "auto", "shm", "shm+tcp", "tcp"

struct OpenTransportOptions {
  TransportKind kind = TransportKind::automatic;
  ShmTransportOptions shm;
  TcpTransportOptions tcp;
};

struct OpenedTransport {
  std::unique_ptr<Transport> transport;  // null when none of those tried could be made
  TransportKind kind = TransportKind::automatic;  // what it is (shm, hybrid or tcp)
  std::string why_not;  // when null: why each tried could not be made
};

// Collective over the bootstrap's ranks; every rank gets the same kind (or none). host_of:
// each rank's host, as host_indices() numbers them (the caller has exchanged it already).
OpenedTransport open_transport(Bootstrap& bootstrap, const std::vector<int>& host_of,
                               const OpenTransportOptions& options = {});

}  // namespace ringflow::comm
