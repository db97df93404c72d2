#include "ringflow/comm/bootstrap/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "ringflow/comm/base/socket.h"
#include "ringflow/comm/bootstrap/tcp_store_client.h"
#include "ringflow/comm/bootstrap/wait_notice.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x52464253;         // "RFBS"
constexpr uint64_t kMaxBlob = uint64_t{1} << 30;  // more is a stream out of step, not a blob

struct Hello {
  uint32_t magic = kMagic;
  uint32_t rank = 0;
  uint32_t size = 0;
  uint32_t pad = 0;
};

// A length-prefixed string; "" or what went wrong.
std::string send_blob(int fd, const std::string& blob, detail::Deadline deadline) {
  const uint64_t length = blob.size();
  std::string error = detail::send_all(fd, &length, sizeof length, deadline);
  return error.empty() ? detail::send_all(fd, blob.data(), blob.size(), deadline) : error;
}

std::string recv_blob(int fd, std::string* blob, detail::Deadline deadline) {
  uint64_t length = 0;
  std::string error = detail::recv_all(fd, &length, sizeof length, deadline);
  if (!error.empty()) return error;
  if (length > kMaxBlob) return cat("a message of ", length, " bytes (out of step)");
  blob->assign(length, '\0');
  return detail::recv_all(fd, blob->data(), length, deadline);
}

// Where rank 0 publishes its listening address in the store.
std::string rank0_key(const std::string& prefix) { return prefix + "/rank0_address"; }

// "10.0.0.1:41234" (what endpoint_text writes) into addr and port (network byte order).
bool parse_endpoint(const std::string& text, in_addr* addr, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || inet_pton(AF_INET, text.substr(0, colon).c_str(), addr) != 1)
    return false;
  char* end = nullptr;
  const long p = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) return false;
  *port = htons(static_cast<uint16_t>(p));
  return true;
}

// The store at master_addr:master_port; what it waits for goes to the notice, after `about`.
TcpStoreOptions store_options(const TcpBootstrapOptions& o, detail::WaitNotice& notice,
                              const std::string& about) {
  return {.host = o.master_addr, .port = o.master_port, .timeout = o.timeout,
          .on_waiting = [&notice, about](const std::string& what) {
            notice.due([&] { return about + what; });
          }};
}

}  // namespace

TcpBootstrap::TcpBootstrap(const TcpBootstrapOptions& options) : options_(options) {
  RF_CHECK(options.size >= 1, "TcpBootstrap: world size ", options.size, " < 1");
  RF_CHECK(options.rank >= 0 && options.rank < options.size, "TcpBootstrap: rank ",
           options.rank, " outside a world of ", options.size);
  RF_CHECK(options.master_port > 0 && options.master_port < 65536, "TcpBootstrap: port ",
           options.master_port, " outside 1..65535");
  where_ = cat("the rendezvous ", options.through_store ? "through the TCPStore " : "", "at ",
               options.master_addr, ":", options.master_port);
  if (options.size == 1) return;
  if (options.rank == 0) {
    meet_as_root();
  } else {
    meet_as_peer();
  }
}

void TcpBootstrap::fail(const std::string& what) const {
  throw std::runtime_error(cat("TcpBootstrap (", who(), ", ", where_, "): ", what));
}

std::string TcpBootstrap::who() const { return cat("rank ", options_.rank, " of ", options_.size); }

void TcpBootstrap::meet_as_root() {
  const auto deadline = Clock::now() + options_.timeout;
  detail::WaitNotice notice(who(), options_.timeout);
  std::string where;
  Fd listener = listen(notice, &where);
  peers_.resize(options_.size);
  auto missing = [&] {
    std::string ranks;
    for (int q = 1; q < options_.size; ++q) {
      if (!peers_[q]) ranks += cat(ranks.empty() ? "" : ", ", q);
    }
    return ranks;
  };
  for (int met = 1; met < options_.size;) {
    if (!detail::wait_for(listener.get(), POLLIN, notice.until(deadline))) {
      if (Clock::now() >= deadline) {
        fail(cat("timed out after ", options_.timeout.count(), " ms waiting for rank(s) ",
                 missing(), " to connect to ", where));
      }
      notice.due([&] { return cat("rank(s) ", missing(), " to connect to ", where); });
      continue;
    }
    Fd fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) continue;  // EAGAIN, ECONNABORTED: wait for the next one
    Hello hello;
    if (!detail::recv_all(fd.get(), &hello, sizeof hello, deadline).empty() ||
        hello.magic != kMagic) {
      continue;  // not one of ours (a port scan, another program): wait past it
    }
    std::string refusal;
    if (static_cast<int>(hello.size) != options_.size) {
      refusal = cat("rank ", hello.rank, " was started for a world of ", hello.size,
                    " ranks, rank 0 for ", options_.size);
    } else if (hello.rank == 0 || static_cast<int>(hello.rank) >= options_.size) {
      refusal = cat("a rank ", hello.rank, " outside 1..", options_.size - 1, " connected");
    } else if (peers_[hello.rank]) {
      refusal = cat("rank ", hello.rank, " connected twice (two processes with RANK=",
                    hello.rank, "?)");
    }
    send_blob(fd.get(), refusal, deadline);
    if (!refusal.empty()) fail(refusal);
    peers_[hello.rank] = std::move(fd);
    ++met;
  }
}

Fd TcpBootstrap::listen(detail::WaitNotice& notice, std::string* where) {
  std::string error;
  sockaddr_in bound{};
  const in_addr any{htonl(INADDR_ANY)};
  if (!options_.through_store) {
    Fd listener = detail::listen_on(any, htons(static_cast<uint16_t>(options_.master_port)),
                                    options_.size, &bound, &error);
    if (!listener) fail(cat(error, " (another job on this port? set MASTER_PORT)"));
    *where = cat("port ", options_.master_port, " of this host");
    return listener;
  }
  Fd listener = detail::listen_on(any, 0, options_.size, &bound, &error);
  if (!listener) fail(error);
  try {
    TcpStoreClient store(store_options(options_, notice, ""));
    // The address this host reaches the store from: the store's host, where torchrun
    // runs rank 0, and the other hosts, which reach the store too, can reach it.
    *where = detail::endpoint_text(store.local_address().s_addr, bound.sin_port);
    store.set(rank0_key(options_.store_prefix), *where);
    *where += cat(", published in the TCPStore at ", store.address());
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  if (!error.empty()) fail(error);
  return listener;
}

void TcpBootstrap::meet_as_peer() {
  const auto deadline = Clock::now() + options_.timeout;
  detail::WaitNotice notice(who(), options_.timeout);
  Fd fd = options_.through_store ? connect_through_store(deadline, notice)
                                 : connect_to_root(deadline, notice);
  const Hello hello{kMagic, static_cast<uint32_t>(options_.rank),
                    static_cast<uint32_t>(options_.size), 0};
  std::string refusal;
  std::string error = detail::send_all(fd.get(), &hello, sizeof hello, deadline);
  if (error.empty()) error = recv_blob(fd.get(), &refusal, deadline);
  if (!error.empty()) fail(cat("greeting rank 0: ", error));
  if (!refusal.empty()) fail(cat("rank 0 refused this rank: ", refusal));
  peers_.resize(1);
  peers_[0] = std::move(fd);
}

Fd TcpBootstrap::connect_to_root(Clock::time_point deadline, detail::WaitNotice& notice) {
  in_addr addr{};
  std::string error;
  if (!detail::resolve_ipv4(options_.master_addr, &addr, &error)) fail(error);
  int err = 0;
  Fd fd = detail::connect_retrying(
      addr, htons(static_cast<uint16_t>(options_.master_port)), deadline,
      [&](int e) {
        notice.due([&] {
          return cat("rank 0 to listen at ", options_.master_addr, ":", options_.master_port,
                     " (", std::strerror(e), ")");
        });
      },
      &err);
  if (!fd) {
    fail(cat("could not reach rank 0 within ", options_.timeout.count(), " ms: ",
             std::strerror(err)));
  }
  return fd;
}

// Rank 0's address from the store, then a connection to it. An address that refuses is read
// again: an earlier meeting's rank 0 may have left it, which this one's overwrites.
Fd TcpBootstrap::connect_through_store(Clock::time_point deadline, detail::WaitNotice& notice) {
  const std::string key = rank0_key(options_.store_prefix);
  std::string error;
  try {
    TcpStoreClient store(store_options(options_, notice, "rank 0 to publish its address: "));
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      store.wait({key}, std::max(left, std::chrono::milliseconds(0)));
      const std::string published = store.get(key);
      in_addr addr{};
      uint16_t port = 0;
      if (!parse_endpoint(published, &addr, &port)) {
        error = cat("the TCPStore at ", store.address(), " holds '", published, "' under ", key,
                    ", not rank 0's address");
        break;
      }
      int err = 0;
      if (Fd fd = detail::connect_to(addr, port, deadline, &err)) return fd;
      if (Clock::now() >= deadline) {
        error = cat("could not reach rank 0 at ", published, " (its address in the TCPStore at ",
                    store.address(), ") within ", options_.timeout.count(), " ms: ",
                    std::strerror(err));
        break;
      }
      notice.due([&] { return cat("rank 0 at ", published, " (", std::strerror(err), ")"); });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::runtime_error& e) {
    error = cat("rank 0 did not publish its address (key ", key, ") within ",
                options_.timeout.count(), " ms: ", e.what());
  }
  fail(error);
}

std::vector<std::string> TcpBootstrap::allgather(const std::string& mine) {
  const int64_t seq = allgathers_++;
  std::vector<std::string> blobs(options_.size);
  blobs[options_.rank] = mine;
  if (options_.size == 1) return blobs;
  const auto deadline = Clock::now() + options_.timeout;
  auto check = [&](const std::string& error, int peer) {
    if (!error.empty()) fail(cat("allgather #", seq, " with rank ", peer, ": ", error));
  };
  if (options_.rank != 0) {
    check(send_blob(peers_[0].get(), mine, deadline), 0);
    for (int q = 0; q < options_.size; ++q) {
      if (q != options_.rank) check(recv_blob(peers_[0].get(), &blobs[q], deadline), 0);
    }
    return blobs;
  }
  for (int q = 1; q < options_.size; ++q) check(recv_blob(peers_[q].get(), &blobs[q], deadline), q);
  for (int q = 1; q < options_.size; ++q) {
    for (int b = 0; b < options_.size; ++b) {
      if (b != q) check(send_blob(peers_[q].get(), blobs[b], deadline), q);
    }
  }
  return blobs;
}

}  // namespace ringflow::comm
