// Note [liveness links]: MPI (MPICH 4.0 over UCX's TCP) reports nothing when a rank of
// another node dies: the survivors wait in MPI_Testsome until the collective's timeout,
// then hang in MPI_Finalize (docs/failures.md). The kernel closes a killed process's
// sockets, so a connection that nothing else travels on turns readable exactly when the
// peer's process is gone; a rank that destroys its group first sends one goodbye byte, so
// that leaving is never taken for dying. Keepalive probes (idle 2 s, every 1 s, 3 lost)
// end a connection whose host vanished without closing anything.
#include "ringflow/comm/group/peer_watch.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ringflow/comm/base/process.h"
#include "ringflow/comm/group/device_choice.h"
#include "ringflow/comm/transport/tcp_mesh.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

constexpr char kGoodbye = 'B';

void keep_alive(int fd) {
  const int on = 1, idle = 2, interval = 1, count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// "node\npid\nhost" of one rank, through the bootstrap.
struct Identity {
  std::string node;
  int pid = 0;
  std::string host;
};

Identity parse_identity(const std::string& blob, int rank) {
  const size_t a = blob.find('\n'), b = blob.rfind('\n');
  RF_CHECK(a != std::string::npos && b > a, "PeerWatch: rank ", rank, " sent no identity");
  return {blob.substr(0, a), std::atoi(blob.c_str() + a + 1), blob.substr(b + 1)};
}

}  // namespace

PeerWatch::PeerWatch(Bootstrap& bootstrap, const std::string& interface,
                     std::chrono::milliseconds setup_timeout) {
  const std::string me = node_identity();
  const std::vector<std::string> all =
      bootstrap.allgather(cat(me, "\n", ::getpid(), "\n", host_name()));
  std::vector<bool> remote(all.size(), false);
  for (int q = 0; q < bootstrap.size(); ++q) {
    if (q == bootstrap.rank()) continue;
    const Identity id = parse_identity(all[q], q);
    remote[q] = id.node != me;
    peers_.push_back({q, id.pid, remote[q] ? id.host : "", Fd(), "", false});
  }
  // With more than one node every rank has a peer on another, so all or none connect.
  if (std::none_of(remote.begin(), remote.end(), [](bool r) { return r; })) return;
  std::optional<TcpMesh> mesh = connect_mesh(bootstrap, remote, interface, setup_timeout, &unwatched_);
  if (!mesh) {
    unwatched_ = cat("ranks of other nodes are not watched: ", unwatched_);
    return;
  }
  for (Peer& p : peers_) {
    p.link = std::move(mesh->fds[p.rank]);
    if (p.link) keep_alive(p.link.get());
  }
}

PeerWatch::~PeerWatch() {
  for (Peer& p : peers_) {
    if (p.link && p.dead.empty()) send(p.link.get(), &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

// Nothing but the goodbye travels on a link: anything readable is it, an end of stream
// (the process exited) or an error (keepalive timed out: the host or the network is gone).
std::string PeerWatch::link_ended(Peer& p) {
  pollfd pfd{p.link.get(), POLLIN, 0};
  if (::poll(&pfd, 1, 0) <= 0) return "";
  char byte = 0;
  const ssize_t got = recv(p.link.get(), &byte, 1, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return "";
  if (got == 1 && byte == kGoodbye) {
    p.left = true;
    return "";
  }
  if (got == 0) return "has exited";
  return cat("is unreachable: its liveness link failed: ",
             got < 0 ? std::strerror(errno) : "unexpected bytes");
}

bool PeerWatch::saw_death() const {
  return std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.dead.empty(); });
}

std::string PeerWatch::dead_peers() {
  std::string out;
  for (Peer& p : peers_) {
    if (p.dead.empty() && !p.left) {
      if (p.link) p.dead = link_ended(p);
      else if (p.host.empty() && !process_alive(p.pid)) p.dead = "has exited";
    }
    if (p.dead.empty()) continue;
    out += cat(out.empty() ? "" : "; ", "rank ", p.rank, " (process ", p.pid,
               p.host.empty() ? "" : cat(" on ", p.host), ") ", p.dead);
  }
  return out;
}

}  // namespace ringflow::comm
