#include "ringflow/comm/bootstrap/tcp_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "ringflow/comm/base/socket.h"
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

}  // namespace

TcpBootstrap::TcpBootstrap(const TcpBootstrapOptions& options) : options_(options) {
  RF_CHECK(options.size >= 1, "TcpBootstrap: world size ", options.size, " < 1");
  RF_CHECK(options.rank >= 0 && options.rank < options.size, "TcpBootstrap: rank ",
           options.rank, " outside a world of ", options.size);
  RF_CHECK(options.master_port > 0 && options.master_port < 65536, "TcpBootstrap: port ",
           options.master_port, " outside 1..65535");
  where_ = cat("the rendezvous at ", options.master_addr, ":", options.master_port);
  if (options.size == 1) return;
  if (options.rank == 0) {
    meet_as_root();
  } else {
    meet_as_peer();
  }
}

void TcpBootstrap::fail(const std::string& what) const {
  throw std::runtime_error(cat("TcpBootstrap (rank ", options_.rank, " of ", options_.size,
                               ", ", where_, "): ", what));
}

void TcpBootstrap::meet_as_root() {
  std::string error;
  sockaddr_in bound{};
  in_addr any{htonl(INADDR_ANY)};
  Fd listener = detail::listen_on(any, htons(static_cast<uint16_t>(options_.master_port)),
                                  options_.size, &bound, &error);
  if (!listener) fail(cat(error, " (another job on this port? set MASTER_PORT)"));
  const auto deadline = Clock::now() + options_.timeout;
  peers_.resize(options_.size);
  for (int met = 1; met < options_.size;) {
    if (!detail::wait_for(listener.get(), POLLIN, deadline)) {
      std::string missing;
      for (int q = 1; q < options_.size; ++q) {
        if (!peers_[q]) missing += cat(missing.empty() ? "" : ", ", q);
      }
      fail(cat("timed out after ", options_.timeout.count(), " ms waiting for rank(s) ",
               missing, " to connect"));
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

void TcpBootstrap::meet_as_peer() {
  in_addr addr{};
  std::string error;
  if (!detail::resolve_ipv4(options_.master_addr, &addr, &error)) fail(error);
  const auto deadline = Clock::now() + options_.timeout;
  const uint16_t port = htons(static_cast<uint16_t>(options_.master_port));
  Fd fd;
  int err = 0;
  // Rank 0 may not listen yet: every launcher starts the ranks in no particular order.
  while (!(fd = detail::connect_to(addr, port, deadline, &err))) {
    if (Clock::now() >= deadline) {
      fail(cat("could not reach rank 0 within ", options_.timeout.count(), " ms: ",
               std::strerror(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const Hello hello{kMagic, static_cast<uint32_t>(options_.rank),
                    static_cast<uint32_t>(options_.size), 0};
  std::string refusal;
  error = detail::send_all(fd.get(), &hello, sizeof hello, deadline);
  if (error.empty()) error = recv_blob(fd.get(), &refusal, deadline);
  if (!error.empty()) fail(cat("greeting rank 0: ", error));
  if (!refusal.empty()) fail(cat("rank 0 refused this rank: ", refusal));
  peers_.resize(1);
  peers_[0] = std::move(fd);
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
