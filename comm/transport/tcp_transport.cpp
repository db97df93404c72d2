// Note [TCP transport]: why our algorithms do not talk through MPI across nodes.
// MPICH 4.0.2 (ch4:ucx, UCX 1.13 over TCP) makes progress only when a thread calls into
// it: a rank waiting for a message must poll. The process group's communication thread
// polls every 200 us while the training thread computes (comm/base/backoff.h), and every poll
// that finds nothing is a context switch away from the computation. Worse, a large message
// moves only when the receiver polls (UCX's rendezvous handshake and its socket reads), so
// between polls the link idles: on bench/cluster's 2 hosts at 1 Gbit/s, ddp's ring moved
// VGG-11's gradients at 80-93 MB/s while backward ran beside it, 119 MB/s (the link) only
// once the training thread waited and the communication thread spun; at 4 hosts on 2
// cores, where the ranks' polling leaves the kernel's TCP work too little CPU, our ring
// over MPI and MPI_Allreduce itself reached half the link rate. Here a waiting rank sleeps
// in poll() and the kernel wakes it when bytes or buffer space arrive; what the kernel can
// move without us (socket buffers of megabytes) it moves while we compute. Measured: the
// same ddp allreduces at the link rate, the 4-host ring at 0.119 GB/s (README, "Emulated
// cluster").
//
// Wire format: each message is an 8-byte length (host order: both ends are the same
// build) followed by its bytes; the connection between ranks a < b is made by b, which
// greets a with a magic number and its rank. The listening addresses go round through the
// group's Bootstrap (MPI or the TCP rendezvous).
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
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kHello = 0x52465450;  // "RFTP"

struct Endpoint {     // what each rank tells the others, through the bootstrap
  uint32_t addr = 0;  // network byte order
  uint16_t port = 0;  // network byte order
  uint16_t ok = 0;    // 0: this rank could not listen
};

struct Hello {
  uint32_t magic = kHello;
  uint32_t rank = 0;
};

using detail::endpoint_text;
using detail::poll_timeout;
using detail::wait_for;

// A connection to `to`, greeted with our rank; invalid and *error on failure.
Fd connect_to(const Endpoint& to, int peer, int rank, Clock::time_point deadline,
              std::string* error) {
  int err = 0;
  Fd fd = detail::connect_to(in_addr{to.addr}, to.port, deadline, &err);
  const Hello hello{kHello, static_cast<uint32_t>(rank)};
  if (fd && send(fd.get(), &hello, sizeof hello, MSG_NOSIGNAL) != sizeof hello) err = errno;
  if (err != 0) {
    *error = cat("rank ", rank, " could not connect to rank ", peer, " at ",
                 endpoint_text(to.addr, to.port), ": ", std::strerror(err));
    return Fd();
  }
  return fd;
}

// Accepts one connection and reads its greeting: the peer's rank, or -1 when the deadline
// passed first (a connection that does not greet as a rank is dropped and waited past).
int accept_one(int listener, Clock::time_point deadline, Fd* out) {
  while (wait_for(listener, POLLIN, deadline)) {
    Fd fd(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) continue;  // EAGAIN, ECONNABORTED, EINTR: wait for the next one
    Hello hello{};
    if (detail::recv_all(fd.get(), &hello, sizeof hello, deadline).empty() &&
        hello.magic == kHello) {
      *out = std::move(fd);
      return static_cast<int>(hello.rank);
    }
  }
  return -1;
}

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
  const int rank = bootstrap.rank(), size = bootstrap.size();

  // Listen, then tell everyone where.
  std::string reason;
  Endpoint mine;
  in_addr addr{};
  Fd listener;
  if (detail::pick_address(options.interface, &addr, &reason)) {
    sockaddr_in bound{};
    listener = detail::listen_on(addr, 0, std::max(size, 16), &bound, &reason);
    if (listener) mine = {bound.sin_addr.s_addr, bound.sin_port, 1};
  }
  if (!listener) reason = cat("rank ", rank, ": ", reason);
  std::vector<Endpoint> all(size);
  const std::vector<std::string> blobs =
      bootstrap.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
  for (int q = 0; q < size; ++q) {
    RF_CHECK(blobs[q].size() == sizeof(Endpoint), "TcpTransport::create: rank ", q,
             " sent an address of ", blobs[q].size(), " bytes");
    std::memcpy(&all[q], blobs[q].data(), sizeof(Endpoint));
  }
  // A rank that found no interface but loopback cannot be reached from another host.
  auto loopback = [](const Endpoint& e) { return e.addr == htonl(INADDR_LOOPBACK); };
  const bool one_address = std::all_of(all.begin(), all.end(),
                                       [&](const Endpoint& e) { return e.addr == all[0].addr; });
  const bool stranded = !one_address && std::any_of(all.begin(), all.end(), loopback);
  bool ok = mine.ok != 0;
  if (ok && stranded && loopback(mine)) {
    reason = cat("rank ", rank, " has no network interface that is up but loopback, and the "
                 "other ranks listen elsewhere (give TcpTransportOptions::interface)");
    ok = false;
  }
  // Connect only where every rank listens where the others can reach it.
  const bool reachable = !stranded && std::all_of(all.begin(), all.end(),
                                                  [](const Endpoint& e) { return e.ok != 0; });

  // Rank b connects to every a < b; connections complete in the listeners' backlogs, so
  // connecting before accepting cannot deadlock.
  std::vector<Fd> fds(size);
  const auto deadline = Clock::now() + options.setup_timeout;
  for (int q = 0; q < rank && ok && reachable; ++q) {
    fds[q] = connect_to(all[q], q, rank, deadline, &reason);
    ok = fds[q].valid();
  }
  for (int accepted = 0; accepted < size - 1 - rank && ok && reachable; ++accepted) {
    Fd fd;
    const int peer = accept_one(listener.get(), deadline, &fd);
    if (peer < 0) {
      std::string missing;
      for (int q = rank + 1; q < size; ++q) {
        if (!fds[q]) missing += cat(missing.empty() ? "" : ", ", q);
      }
      reason = cat("rank ", rank, " timed out waiting for rank(s) ", missing, " to connect to ",
                   endpoint_text(mine.addr, mine.port));
      ok = false;
    } else if (peer <= rank || peer >= size || fds[peer]) {
      reason = cat("rank ", rank, ": a greeting from rank ", peer, ", not a rank above it");
      ok = false;
    } else {
      fds[peer] = std::move(fd);
    }
  }
  listener.reset();

  // Every rank learns whether all succeeded and, if not, the first failing rank's reason.
  if (ok) reason.clear();
  for (const std::string& theirs : bootstrap.allgather(reason)) {
    if (theirs.empty()) continue;
    if (why_not) *why_not = theirs;
    return nullptr;
  }
  const int one = 1;
  for (int q = 0; q < size; ++q) {  // small messages (latency-bound algorithms) leave at once
    if (fds[q]) setsockopt(fds[q].get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(rank, size, std::move(fds), endpoint_text(mine.addr, mine.port)));
}

TcpTransport::TcpTransport(int rank, int size, std::vector<Fd> fds, std::string address)
    : rank_(rank), size_(size), fds_(std::move(fds)), address_(std::move(address)) {}

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

}  // namespace ringflow::comm
