#include "ringflow/comm/transport/open_transport.h"

#include <algorithm>
#include <stdexcept>

#include "ringflow/comm/transport/hybrid_transport.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

const char* transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::automatic: return "auto";
    case TransportKind::shm: return "shm";
    case TransportKind::hybrid: return "shm+tcp";
    case TransportKind::tcp: return "tcp";
  }
  return "?";
}

OpenedTransport open_transport(Bootstrap& bootstrap, const std::vector<int>& host_of,
                               const OpenTransportOptions& options) {
  TransportKind kind = options.kind;
  if (kind == TransportKind::automatic) {
    const int hosts = *std::max_element(host_of.begin(), host_of.end()) + 1;
    kind = hosts == 1                                   ? TransportKind::shm
           : hosts < static_cast<int>(host_of.size()) ? TransportKind::hybrid
                                                        : TransportKind::tcp;
  }
  OpenedTransport opened;
  std::string why;
  // Each create answers the same on every rank, so every rank falls back alike.
  if (kind == TransportKind::shm) {
    opened.transport = ShmTransport::create(bootstrap, options.shm, &why);
    if (!opened.transport) opened.why_not = cat("shm: ", why);
  } else if (kind == TransportKind::hybrid) {
    opened.transport = HybridTransport::create(bootstrap, host_of, options.shm, options.tcp, &why);
    if (!opened.transport) opened.why_not = cat("shm+tcp: ", why);
  }
  if (opened.transport) {
    opened.kind = kind;
    return opened;
  }
  if (kind == options.kind && kind != TransportKind::tcp) return opened;  // asked for, not made
  opened.transport = TcpTransport::create(bootstrap, options.tcp, &why);
  if (opened.transport) {
    opened.kind = TransportKind::tcp;
  } else {
    opened.why_not += cat(opened.why_not.empty() ? "" : "; ", "tcp: ", why);
  }
  return opened;
}

}  // namespace ringflow::comm
