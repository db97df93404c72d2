// The connection between ranks a < b is made by b, which greets a with a magic number and
// its rank; connections complete in the listeners' backlogs, so connecting before
// accepting cannot deadlock. The listening addresses go round through the Bootstrap (MPI
// or the TCP rendezvous).
#include "ringflow/comm/transport/tcp_mesh.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

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
  while (detail::wait_for(listener, POLLIN, deadline)) {
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

// Every rank's listening address, through the bootstrap.
std::vector<Endpoint> exchange_endpoints(Bootstrap& bootstrap, const Endpoint& mine) {
  std::vector<Endpoint> all(static_cast<size_t>(bootstrap.size()));
  const std::vector<std::string> blobs =
      bootstrap.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
  for (int q = 0; q < bootstrap.size(); ++q) {
    RF_CHECK(blobs[q].size() == sizeof(Endpoint), "connect_mesh: rank ", q, " sent an address of ",
             blobs[q].size(), " bytes");
    std::memcpy(&all[q], blobs[q].data(), sizeof(Endpoint));
  }
  return all;
}

}  // namespace

std::optional<TcpMesh> connect_mesh(Bootstrap& bootstrap, const std::vector<bool>& linked,
                                    const std::string& interface,
                                    std::chrono::milliseconds setup_timeout,
                                    std::string* why_not) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  RF_CHECK(static_cast<int>(linked.size()) == size, "connect_mesh: ", linked.size(),
           " links for ", size, " ranks");

  // Listen, then tell everyone where.
  std::string reason;
  Endpoint mine;
  in_addr addr{};
  Fd listener;
  if (detail::pick_address(interface, &addr, &reason)) {
    sockaddr_in bound{};
    listener = detail::listen_on(addr, 0, std::max(size, 16), &bound, &reason);
    if (listener) mine = {bound.sin_addr.s_addr, bound.sin_port, 1};
  }
  if (!listener) reason = cat("rank ", rank, ": ", reason);
  const std::vector<Endpoint> all = exchange_endpoints(bootstrap, mine);
  // A rank that found no interface but loopback cannot be reached from another host.
  auto loopback = [](const Endpoint& e) { return e.addr == htonl(INADDR_LOOPBACK); };
  const bool one_address = std::all_of(all.begin(), all.end(),
                                       [&](const Endpoint& e) { return e.addr == all[0].addr; });
  const bool stranded = !one_address && std::any_of(all.begin(), all.end(), loopback);
  bool ok = mine.ok != 0;
  if (ok && stranded && loopback(mine)) {
    reason = cat("rank ", rank, " has no network interface that is up but loopback, and the "
                 "other ranks listen elsewhere (give the interface)");
    ok = false;
  }
  // Connect only where every rank listens where the others can reach it.
  const bool reachable = !stranded && std::all_of(all.begin(), all.end(),
                                                  [](const Endpoint& e) { return e.ok != 0; });

  TcpMesh mesh{std::vector<Fd>(static_cast<size_t>(size)), endpoint_text(mine.addr, mine.port)};
  std::vector<Fd>& fds = mesh.fds;
  const auto deadline = Clock::now() + setup_timeout;
  for (int q = 0; q < rank && ok && reachable; ++q) {
    if (!linked[q]) continue;
    fds[q] = connect_to(all[q], q, rank, deadline, &reason);
    ok = fds[q].valid();
  }
  const int above = static_cast<int>(std::count(linked.begin() + rank + 1, linked.end(), true));
  for (int accepted = 0; accepted < above && ok && reachable; ++accepted) {
    Fd fd;
    const int peer = accept_one(listener.get(), deadline, &fd);
    if (peer < 0) {
      std::string missing;
      for (int q = rank + 1; q < size; ++q) {
        if (linked[q] && !fds[q]) missing += cat(missing.empty() ? "" : ", ", q);
      }
      reason = cat("rank ", rank, " timed out waiting for rank(s) ", missing, " to connect to ",
                   endpoint_text(mine.addr, mine.port));
      ok = false;
    } else if (peer <= rank || peer >= size || !linked[peer] || fds[peer]) {
      reason = cat("rank ", rank, ": a greeting from rank ", peer, ", not a linked rank above it");
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
    return std::nullopt;
  }
  return mesh;
}

}  // namespace ringflow::comm
