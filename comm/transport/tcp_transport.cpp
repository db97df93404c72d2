// Note [TCP transport]: why our algorithms do not talk through MPI across nodes.
// MPICH 4.0.2 (ch4:ucx, UCX 1.13 over TCP) makes progress only when a thread calls into
// it: a rank waiting for a message must poll. The process group's communication thread
// polls every 200 us while the training thread computes (comm/base/backoff.h), and every poll
// that finds nothing is a context switch away from the computation. Worse, a large message
// moves only when the receiver polls (UCX's rendezvous handshake and its socket reads), so
// between polls the link idles: under bench/cluster, ddp's ring over MPI stayed below the
// link rate while backward ran beside it, and where the ranks' polling left the kernel's
// TCP work too little CPU, our ring over MPI and MPI_Allreduce itself reached half of it.
// Here a waiting rank sleeps in poll() and the kernel wakes it when bytes or buffer space
// arrive; what the kernel can move without us (socket buffers of megabytes) it moves while
// we compute, and the same allreduces run at the link rate (docs/emulated-cluster.md).
//
// Wire format: each message is an 8-byte length (host order: both ends are the same
// build) followed by its bytes, over a connection per pair of ranks (comm/transport/tcp_mesh.h).
#include "ringflow/comm/transport/tcp_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "ringflow/comm/base/socket.h"
#include "ringflow/comm/transport/tcp_mesh.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using detail::poll_timeout;

constexpr size_t kWakeBytes = 256 << 10;  // Note [waking per chunk]

// What is left of a message (its 8-byte header, then its data) after `done` bytes.
int rest_of_message(size_t done, uint64_t* header, void* data, size_t data_bytes, iovec* iov) {
  constexpr size_t h = sizeof *header;
  int n = 0;
  if (done < h) iov[n++] = {reinterpret_cast<char*>(header) + done, h - done};
  const size_t skip = done > h ? done - h : 0;
  iov[n++] = {static_cast<char*>(data) + skip, data_bytes - skip};
  return n;
}

}  // namespace

std::unique_ptr<TcpTransport> TcpTransport::create(Bootstrap& bootstrap,
                                                   const TcpTransportOptions& options,
                                                   std::string* why_not) {
  std::vector<bool> everyone(static_cast<size_t>(bootstrap.size()), true);
  everyone[static_cast<size_t>(bootstrap.rank())] = false;
  std::optional<TcpMesh> mesh =
      connect_mesh(bootstrap, everyone, options.interface, options.setup_timeout, why_not);
  if (!mesh) return nullptr;
  const int one = 1;
  for (const Fd& fd : mesh->fds) {  // small messages (latency-bound algorithms) leave at once
    if (fd) setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return std::unique_ptr<TcpTransport>(new TcpTransport(
      bootstrap.rank(), bootstrap.size(), std::move(mesh->fds), std::move(mesh->address)));
}

TcpTransport::TcpTransport(int rank, int size, std::vector<Fd> fds, std::string address)
    : rank_(rank), size_(size), fds_(std::move(fds)), address_(std::move(address)),
      lowat_(fds_.size(), 1) {}

TcpTransport::~TcpTransport() = default;

void TcpTransport::send(const void* data, size_t bytes, int peer) {
  exchange(data, bytes, peer, nullptr, 0, -1, "send");
}

void TcpTransport::recv(void* data, size_t bytes, int peer) {
  exchange(nullptr, 0, -1, data, bytes, peer, "recv");
}

void TcpTransport::sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                            size_t recv_bytes, int from) {
  exchange(send_data, send_bytes, to, recv_data, recv_bytes, from, "sendrecv");
}

// Shutting every connection down tells the peers that read from or write to this rank at
// once (end of stream), where they would otherwise wait for their deadlines.
void TcpTransport::fail(const std::string& what) {
  broken_ = what;
  for (const Fd& fd : fds_) {
    if (fd) shutdown(fd.get(), SHUT_RDWR);
  }
  throw std::runtime_error(what);
}

void TcpTransport::exchange(const void* send_data, size_t send_bytes, int to, void* recv_data,
                            size_t recv_bytes, int from, const char* call) {
  if (!broken_.empty()) {
    throw std::runtime_error("TcpTransport: unusable after an earlier failure: " + broken_);
  }
  RF_CHECK(to < size_ && from < size_, "TcpTransport ", call, ": peer ", std::max(to, from),
           " outside a group of ", size_);
  auto where = [&] { return cat("TcpTransport ", call, " on rank ", rank_); };
  // To and from this rank: through to_self_, in order.
  if (to == rank_) {
    const auto* p = static_cast<const unsigned char*>(send_data);
    to_self_.emplace_back(p, p + send_bytes);
    to = -1;
  }
  if (from == rank_) {
    if (to_self_.empty()) fail(cat(where(), ": a receive from itself with nothing sent to itself"));
    if (to_self_.front().size() != recv_bytes) {
      fail(cat(where(), ": expected a message of ", recv_bytes, " bytes from itself, got ",
               to_self_.front().size()));
    }
    std::copy(to_self_.front().begin(), to_self_.front().end(),
              static_cast<unsigned char*>(recv_data));
    to_self_.pop_front();
    from = -1;
  }

  // Each message: its 8-byte length, then its bytes (Note [TCP transport]).
  uint64_t out_header = send_bytes, in_header = 0;
  const size_t out_total = to >= 0 ? sizeof out_header + send_bytes : 0;
  const size_t in_total = from >= 0 ? sizeof in_header + recv_bytes : 0;
  size_t out_done = 0, in_done = 0;
  auto closed_by = [&](int peer, int err) {
    return err == 0 || err == ECONNRESET || err == EPIPE
               ? cat(where(), ": rank ", peer,
                     " closed its connection (it exited, or failed and gave up on the group)")
               : cat(where(), ": with rank ", peer, ": ", std::strerror(err));
  };
  for (;;) {
    while (out_done < out_total) {
      iovec iov[2];
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = rest_of_message(out_done, &out_header, const_cast<void*>(send_data),
                                       send_bytes, iov);
      const ssize_t sent = sendmsg(fds_[to].get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (sent < 0) fail(closed_by(to, errno));
      out_done += static_cast<size_t>(sent);
    }
    while (in_done < in_total) {
      iovec iov[2];
      const int n = rest_of_message(in_done, &in_header, recv_data, recv_bytes, iov);
      const ssize_t got = readv(fds_[from].get(), iov, n);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (got <= 0) fail(closed_by(from, got == 0 ? 0 : errno));
      const bool had_header = in_done >= sizeof in_header;
      in_done += static_cast<size_t>(got);
      if (!had_header && in_done >= sizeof in_header && in_header != recv_bytes) {
        fail(cat(where(), ": expected a message of ", recv_bytes, " bytes from rank ", from,
                 ", got ", in_header, " (the ranks disagree on the collective's size)"));
      }
    }
    const bool sending = out_done < out_total, receiving = in_done < in_total;
    if (!sending && !receiving) return;

    pollfd p[2];
    int n = 0;
    if (sending) p[n++] = {fds_[to].get(), POLLOUT, 0};
    if (receiving && sending && from == to) {
      p[0].events |= POLLIN;
    } else if (receiving) {
      p[n++] = {fds_[from].get(), POLLIN, 0};
    }
    if (receiving) {  // until the length is in and checked, only the header is sure to come
      wake_when_readable(from, in_done < sizeof in_header ? sizeof in_header - in_done
                                                          : in_total - in_done);
    }
    const int timeout = poll_timeout(deadline_);
    if (timeout == 0) {
      fail(cat(where(), " timed out waiting for ",
               receiving && sending && from != to ? cat("rank ", from, " and rank ", to)
                                                  : cat("rank ", receiving ? from : to)));
    }
    if (poll(p, n, timeout) < 0 && errno != EINTR) {
      fail(cat(where(), ": poll: ", std::strerror(errno)));
    }
  }
}

// Note [waking per chunk]: poll() reports a socket readable as soon as one byte is queued,
// so the communication thread woke for every packet or two of a large message, and on a
// node whose cores all compute each wake-up preempted a compute thread. SO_RCVLOWAT makes
// the kernel wake it once kWakeBytes are queued, or all that is left of the message when
// that is less (else the last bytes would wait for the next message's). Before the
// message's length is read and checked, only its 8-byte header is sure to come: a message
// shorter than expected must still wake the receiver, to be named. A closed or failed
// connection still wakes it at once. Waiting for all of a ring segment instead slowed the
// transfers (the copy out of the socket starts only at the end); a quarter of a MiB keeps
// it overlapped with the transfer. The counts: docs/ddp-study.md.
void TcpTransport::wake_when_readable(int peer, size_t bytes) {
  const int want = static_cast<int>(std::min(bytes, kWakeBytes));
  int& lowat = lowat_[static_cast<size_t>(peer)];
  if (lowat == want) return;
  if (setsockopt(fds_[peer].get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) != 0) {
    fail(cat("TcpTransport on rank ", rank_, ": setsockopt(SO_RCVLOWAT) with rank ", peer, ": ",
             std::strerror(errno)));
  }
  lowat = want;
}

}  // namespace ringflow::comm
