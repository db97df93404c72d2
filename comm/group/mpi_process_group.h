// MpiProcessGroup: the ProcessGroup contract (comm/group/process_group.h) over MPICH.
//
// Threading: every collective runs on one communication thread per group, in issue order,
// so the caller keeps computing (the DDP reducer overlaps backward with communication
// through this): see QueuedProcessGroup. The group owns three duplicates of the parent communicator: one for
// MPI's own collectives and send/recv, one for our allreduce algorithms, one for
// checking-mode fingerprints, so their messages never match each other's. Our algorithms
// talk through shared memory when every rank is on this node (ShmTransport), else through
// TCP connections of their own (TcpTransport), both made at construction, else through MPI
// point to point (MpiTransport); see MpiProcessGroupOptions.
//
// MPI's lifecycle: see Note [MPI lifecycle] in mpi_process_group.cpp. In short, the first
// group initialises MPI with MPI_THREAD_MULTIPLE unless the program already did (then it
// must have asked for MPI_THREAD_MULTIPLE); MPI is finalised at exit only if a group
// initialised it, and then, once a group broke or saw a rank exit, the job is aborted
// instead (MPI_Abort, after the other ranks' goodbyes: finalize would wait for the missing
// rank for ever). Destroy every group before main returns.
//
// Timeouts: see Note [timeouts] in mpi_process_group.cpp.
//
// CUDA tensors: taken too, and staged through page-locked host memory on the communication
// thread (copied to the host before the collective and back after it), so that our
// algorithms and MPI's own collectives run on device buffers; see Note [CUDA tensors over
// MPI] in mpi_process_group.cpp. The ranks may share one GPU. NcclProcessGroup
// (comm/group/nccl_process_group.h) moves device memory directly, one GPU per rank.
//
// Reductions of f16/bf16: with Algorithm::native (and for reduce, reduce_scatter) the
// tensor is widened to f32, reduced by MPI in f32 and rounded back once (MPICH 4.0 has no
// 16-bit float type); our algorithms (naive, tree, recursive doubling, ring) add in f32
// and round back after each addition (comm/algorithms/allreduce.h). Counts are limited to INT_MAX
// elements per call (MPI's int count); more throws std::invalid_argument at the call.
// ReduceOp::avg is a sum divided once by size() at the end (integers truncate).
//
// Broadcasts go through that shared-memory or TCP transport too (binomial tree) where the
// group has one: its waits sleep until bytes arrive, where MPI's requests must be polled.
//
// Traffic (Work::traffic): our algorithms report the bytes their transport moved (measured,
// payload only); MPI's own collectives report the models of comm/base/traffic.h, with 16-bit
// reductions counted at the f32 width they travel at.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/comm/group/queued_process_group.h"
#include "ringflow/comm/transport/open_transport.h"

namespace ringflow::comm {

class Transport;

struct MpiProcessGroupOptions {
  // Before each collective, exchange a fingerprint (kind, reduce op, dtype, count, root,
  // algorithm, sequence number) with every rank: a mismatch fails the collective on every
  // rank with both fingerprints in the message, and a rank that does not arrive within the
  // timeout is named. Costs one small all-to-all message round per collective.
  bool checking = false;
  // Our allreduce algorithms (naive, tree, recursive doubling, ring, hierarchical) talk
  // through shared memory (comm/transport/shm_transport.h) between the ranks of one node
  // (why: Note [shared-memory transport] in comm/transport/shm_transport.cpp); false: not
  // through shared memory.
  bool shared_memory = true;
  // Across nodes (with shared_memory, shared memory within each node: HybridTransport), or
  // on one node without shared memory, through TCP
  // connections of their own (comm/transport/tcp_transport.h; why: Note [TCP transport] in
  // comm/transport/tcp_transport.cpp), made at construction on socket_interface ("": the first that
  // is up and not loopback, as NCCL picks), or through MPI point to point where those
  // cannot be made (why_not_tcp() says why). false: MPI point to point.
  bool sockets = true;
  std::string socket_interface;
};

// RINGFLOW_COMM_CHECK=1 in the environment: for apps and tests to pass into the options
// (the library itself reads no environment variable).
bool comm_check_requested_by_env();

// Initialises MPI with MPI_THREAD_MULTIPLE unless it is initialised already (then throws
// if it provides less than MPI_THREAD_MULTIPLE). Finalises at exit only if it initialised.
void ensure_mpi_initialized();

// For a process that ends by an error it does not recover from (a Python rank's uncaught
// exception): MPI, where a group initialised it, is aborted at exit instead of finalised, so
// that the launcher stops every rank rather than this one waiting in MPI_Finalize for ranks
// that wait for it in a collective. No effect where MPI is not initialised.
void abort_mpi_at_exit();

class MpiProcessGroup final : public QueuedProcessGroup {
 public:
  // Collective over `parent` (MPI_Comm_dup).
  explicit MpiProcessGroup(MPI_Comm parent = MPI_COMM_WORLD, MpiProcessGroupOptions options = {});
  // Runs the collectives still queued, then stops the communication thread and frees the
  // communicators.
  ~MpiProcessGroup() override;

  std::string backend_name() const override { return "mpi"; }
  Traffic allreduce_traffic_model(int64_t count, DType dtype, Algorithm algo) const override;
  // What our allreduce algorithms talk through: "shm", "shm+tcp", "tcp" or "mpi".
  std::string transport_name() const;
  // The same as a kind: none where our algorithms talk MPI point to point.
  std::optional<TransportKind> transport_kind() const { return transport_kind_; }
  // Why the TCP connections were not made, when options.sockets asked for them and shared
  // memory was not used; empty otherwise.
  const std::string& why_not_tcp() const { return why_not_tcp_; }

 protected:
  void check_device(const char* what, const char* role, Device device) const override;
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
  std::vector<Fingerprint> exchange_fingerprints(Op& op) override;

 private:
  // Polls the requests (MPI_Testsome) until all complete or the op's deadline passes;
  // returns the indices still incomplete (empty: all done). statuses (optional, one per
  // request) receives each completed request's status. peers (optional, one per request):
  // while waiting, the Work's status names the peers still missing.
  std::vector<int> poll(Op& op, std::vector<MPI_Request>& requests, const char* call,
                        MPI_Status* statuses = nullptr, const std::vector<int>* peers = nullptr);
  void wait_or_timeout(Op& op, std::vector<MPI_Request>& requests, const char* call);
  // Our allreduce algorithms on the host buffer b, through shm, TCP or MPI point to point.
  void run_own_allreduce(Op& op, Buffer b, Algorithm algo, const CollectiveOptions& o);
  // body (`what`, for the Work's status) through our transport, else MPI point to point,
  // counting its bytes as the Work's traffic; a failure breaks the group.
  void run_on_transport(Op& op, const std::string& what,
                        const std::function<void(Transport&)>& body);
  // A broken group's requests, which MPI forbids freeing.
  void abandon(const std::vector<MPI_Request>& requests, const std::vector<int>& which);

  MpiProcessGroupOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;        // MPI's collectives, send/recv
  MPI_Comm algo_comm_ = MPI_COMM_NULL;   // our allreduce algorithms
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // fingerprints
  std::unique_ptr<Transport> transport_;  // our algorithms' (null: MPI's); comm thread only
  std::string transport_name_ = "mpi";
  std::optional<TransportKind> transport_kind_;
  std::string why_not_tcp_;
  std::vector<MPI_Request> abandoned_;   // requests of timed-out collectives; comm thread only
};

}  // namespace ringflow::comm
