// A Transport over TCP sockets, for ranks on different nodes: one connection per pair of
// ranks, set up collectively through a Bootstrap (which carries only the addresses). A
// rank that waits for the network sleeps in poll() until the kernel has bytes or buffer
// space for it, where MPICH's progress engine (ch4:ucx over TCP) can only poll: on a node
// whose cores also compute (ddp's overlap) or host several ranks, polling takes the cores
// that the computation and the kernel's own TCP work need. Why and what it gave: Note [TCP
// transport] in tcp_transport.cpp.
//
// Every message carries its length, so a rank that expects another length throws naming
// both. A peer that exits closes its connections, and one that fails (a deadline, a
// length) shuts its connections down, so the peers reading from or writing to it throw at
// once, naming it; the others hear of it as the failure spreads along the algorithm's
// messages (each naming the neighbour it heard from) or at their deadlines. A host that
// vanishes without closing anything (power, network) is noticed only at a deadline, as
// with MPI: without one (Deadline::max()) its peers wait for ever. After a throw the
// transport is unusable (a stream stopped part-way through a message): every later call
// throws. Destroying it is local. Threading: calls from one thread at a time.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/base/fd.h"
#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

struct TcpTransportOptions {
  // The network interface whose IPv4 address this rank listens on (e.g. "eth0", "ib0").
  // Empty: the first interface that is up and is not loopback, docker* or virbr*, as
  // NCCL_SOCKET_IFNAME's default does; loopback where there is no other.
  std::string interface;
  // Connecting to and being greeted by every peer must finish within this.
  std::chrono::milliseconds setup_timeout{30000};
};

class TcpTransport final : public Transport {
 public:
  // Collective over the bootstrap's ranks. nullptr on every rank when any rank could not listen or connect,
  // with the first failing rank's reason in *why_not (when given) on every rank, naming the
  // rank and the address. Connecting waits at most options.setup_timeout.
  static std::unique_ptr<TcpTransport> create(Bootstrap& bootstrap,
                                              const TcpTransportOptions& options = {},
                                              std::string* why_not = nullptr);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // "10.77.0.1:40123": where this rank listened.
  const std::string& address() const { return address_; }
  void set_deadline(Deadline deadline) override { deadline_ = deadline; }

  void send(const void* data, size_t bytes, int peer) override;
  void recv(void* data, size_t bytes, int peer) override;
  void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from) override;

 private:
  TcpTransport(int rank, int size, std::vector<Fd> fds, std::string address);
  // Moves one message each way (to < 0: none sent; from < 0: none received).
  void exchange(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from, const char* call);
  [[noreturn]] void fail(const std::string& what);
  // Before a poll() for a message from peer with `bytes` left: Note [waking per chunk].
  void wake_when_readable(int peer, size_t bytes);

  int rank_ = 0, size_ = 1;
  std::vector<Fd> fds_;  // fds_[peer]: the connection to peer; none for this rank
  std::string address_;
  std::deque<std::vector<unsigned char>> to_self_;  // messages sent to this rank, in order
  Deadline deadline_ = Deadline::max();
  std::vector<int> lowat_;  // lowat_[peer]: the SO_RCVLOWAT last set on fds_[peer]
  std::string broken_;  // why the transport is unusable; empty while usable
};

}  // namespace ringflow::comm
