// TransportProcessGroup: the ProcessGroup contract (comm/group/process_group.h) with every
// collective run by our own algorithms over our own transports: shared memory when every
// rank is on one node, shared memory within hosts and TCP across them when hosts have
// several ranks, TCP when each is alone (comm/transport/open_transport.h). Set up through any Bootstrap, so ranks that a
// launcher started with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (TcpBootstrap) need
// no MPI at all. Queued, checked and broken as QueuedProcessGroup says; a transport that
// waits past the collective's deadline names the rank it waited for.
//
// Algorithms: allreduce as asked (native and automatic: choose_allreduce); broadcast down
// a binomial tree; reduce, gather and scatter straight to and from the root; allgather and
// reduce_scatter around a ring; barrier by dissemination. Traffic is what the transport
// moved (measured). send/recv carry their tag, checked at the receiver.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/group/queued_process_group.h"
#include "ringflow/comm/transport/open_transport.h"

namespace ringflow::comm {

struct TransportProcessGroupOptions {
  bool checking = false;         // as MpiProcessGroupOptions::checking
  bool shared_memory = true;     // false: TCP even on one node
  std::string socket_interface;  // as TcpTransportOptions::interface
  std::chrono::milliseconds setup_timeout{30000};
};

class TransportProcessGroup final : public QueuedProcessGroup {
 public:
  // Collective over the bootstrap's ranks, which it uses during construction only. Throws
  // std::runtime_error with the reason when neither transport can be made.
  explicit TransportProcessGroup(Bootstrap& bootstrap, TransportProcessGroupOptions options = {});
  ~TransportProcessGroup() override;

  std::string backend_name() const override { return "ringflow"; }
  std::string transport_name() const { return transport_name_; }  // "shm", "shm+tcp" or "tcp"
  TransportKind transport_kind() const { return transport_kind_; }  // the same as a kind

 protected:
  std::shared_ptr<Work> do_broadcast(const Tensor& tensor, const CollectiveOptions&) override;
  std::shared_ptr<Work> do_reduce(const Tensor& tensor, const CollectiveOptions&) override;
  std::shared_ptr<Work> do_allreduce(const Tensor& tensor, const CollectiveOptions&) override;
  std::shared_ptr<Work> do_allgather(const Tensor& output, const Tensor& input,
                                     const CollectiveOptions&) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& output, const Tensor& input,
                                          const CollectiveOptions&) override;
  std::shared_ptr<Work> do_gather(const Tensor& output, const Tensor& input,
                                  const CollectiveOptions&) override;
  std::shared_ptr<Work> do_scatter(const Tensor& output, const Tensor& input,
                                   const CollectiveOptions&) override;
  std::shared_ptr<Work> do_barrier(const CollectiveOptions&) override;
  std::shared_ptr<Work> do_send(const Tensor& tensor, int peer, int tag,
                                const CollectiveOptions&) override;
  std::shared_ptr<Work> do_recv(const Tensor& tensor, int peer, int tag,
                                const CollectiveOptions&) override;
  void check_device(const char* what, const char* role, Device device) const override;
  Algorithm resolve_allreduce(size_t bytes, Algorithm algo) const override;
  std::vector<Fingerprint> exchange_fingerprints(Op& op) override;

 private:
  using Body = std::function<void(Op&, Transport&)>;
  // Queues body to run on the transport (with the op's deadline), traffic counted.
  std::shared_ptr<Work> enqueue_on_transport(Fingerprint fp, const CollectiveOptions& o,
                                             std::vector<CollectiveArg> args, Body body);
  // The transport, its deadline set to the op's.
  Transport& transport_for(const Op& op);

  std::unique_ptr<Transport> transport_;  // comm thread only, once made
  std::string transport_name_;
  TransportKind transport_kind_ = TransportKind::automatic;
};

}  // namespace ringflow::comm
