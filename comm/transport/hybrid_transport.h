// A Transport for ranks spread over several hosts with several ranks on some: shared memory
// (ShmTransport) between the ranks of one host, TCP (TcpTransport) between hosts, chosen
// per peer. The hierarchical allreduce's legs within a host then never touch a socket, and a
// flat ring's steps inside a host go at memory speed while the steps across wait on the link.
//
// A step whose send and receive go through different transports (a flat ring entering or
// leaving a host) sends from a helper thread while the caller receives, so that neither
// end's full channels wait for the other's whole message; each transport is still used by
// one thread at a time. Failures are the parts' own: a dead rank on this host is named
// within kLivenessPeriod, one on another host when its connections close, a silent one at the
// deadline. Threading: calls from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/transport/shm_transport.h"
#include "ringflow/comm/transport/tcp_transport.h"

namespace ringflow::comm {

class HybridTransport final : public Transport {
 public:
  // Collective over the bootstrap's ranks; host_of: each rank's host (host_indices()).
  // nullptr on every rank, with the reason in *why_not (when given), when some host's
  // shared memory or the TCP connections could not be made.
  static std::unique_ptr<HybridTransport> create(Bootstrap& bootstrap, std::vector<int> host_of,
                                                 const ShmTransportOptions& shm = {},
                                                 const TcpTransportOptions& tcp = {},
                                                 std::string* why_not = nullptr);

  int rank() const override { return tcp_->rank(); }
  int size() const override { return tcp_->size(); }
  // Each rank's host, numbered as host_indices does.
  const std::vector<int>& host_of() const { return host_of_; }
  const TcpTransport& tcp() const { return *tcp_; }
  const ShmTransport& shm() const { return *shm_; }
  bool host_sides_concurrent() const override { return true; }
  void set_deadline(Deadline deadline) override;
  void set_waiters(const Waiters* waiters) override;

  void send(const void* data, size_t bytes, int peer) override;
  void recv(void* data, size_t bytes, int peer) override;
  void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from) override;
  void sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                       int64_t count, DType dtype, ReduceOp op, int from) override;
  void sendrecv_streaming(const void* send_data, size_t send_bytes, int to, void* recv_data,
                          size_t recv_bytes, int from) override;

 private:
  HybridTransport(std::unique_ptr<ShmTransport> shm, std::unique_ptr<TcpTransport> tcp,
                  std::vector<int> host_of, std::vector<int> local_of);
  bool local(int peer) const { return host_of_[peer] == host_of_[rank()]; }
  // The transport that reaches peer, and peer's rank in it (-1 stays -1: no peer).
  Transport& part(int peer) const;
  int in_part(int peer) const { return peer < 0 ? peer : local(peer) ? local_of_[peer] : peer; }
  // Whether one step's send and receive go through different transports.
  bool mixed(int to, int from) const { return to >= 0 && from >= 0 && local(to) != local(from); }
  // A mixed step: the send on a helper thread, `receive` (through from's part) here.
  template <typename Receive>
  void split(const void* send_data, size_t send_bytes, int to, Receive&& receive);

  std::unique_ptr<ShmTransport> shm_;  // the ranks of this host
  std::unique_ptr<TcpTransport> tcp_;  // every rank
  std::vector<int> host_of_;           // every rank's host
  std::vector<int> local_of_;          // every rank's rank within its host
};

}  // namespace ringflow::comm
