// NcclProcessGroup: the ProcessGroup contract (comm/group/process_group.h) for CUDA tensors over
// NCCL, one GPU per rank.
//
// Set-up (collective, every rank constructs it; over any Bootstrap: MPI, the TCP
// rendezvous, or a process group that exists): the ranks exchange host names
// and pick their GPU (NcclProcessGroupOptions::device; by default the local rank modulo the
// host's device count, see comm/group/device_choice.h), check that every rank has one and that no
// two share one, rank 0's ncclUniqueId is broadcast, and every rank creates its
// NCCL communicator (nonblocking, polled under the timeout). Any failure throws CommError on
// every rank, naming the rank and the reason. NCCL refuses two ranks of one communicator on
// one GPU ("Duplicate GPU detected"): on a host with a single GPU only world size 1 runs.
// MpiProcessGroup takes CUDA tensors too (staged through host memory) and lets ranks share
// a GPU.
//
// Devices: the constructing thread's current CUDA device becomes device() (as
// torch.cuda.set_device(local_rank) would): ringflow allocates CUDA tensors and runs their
// kernels on the current device, so create this group's tensors there, and call
// set_cuda_device(pg.device()) (kernels/cuda_devices.h) in any other thread that does.
//
// Streams and completion (Note [NCCL streams] in nccl_process_group.cpp): collectives are
// queued, in issue order, to the group's communication thread (QueuedProcessGroup, shared
// with MpiProcessGroup and TransportProcessGroup), which runs them on the group's own CUDA
// stream, ordered by an event after the kernels the caller had queued on the device's
// legacy default stream when it called (where every ringflow kernel runs), and polls an
// event recorded after the NCCL call: the Work completes when it has. Thread-safe: sequence
// numbers follow the order of the calls.
//
// Timeouts and errors (Note [NCCL timeouts]): the communication thread polls the event and
// ncclCommGetAsyncError. Once the collective's timeout has passed since it started, or NCCL
// reports an error, the communicator is aborted (NCCL cannot cancel a single collective)
// and the group is broken: the Work fails with a CommError naming the collective, its
// sequence number and this rank (and a rank whose process exited, which NCCL cannot tell:
// PeerWatch), and every later collective fails at once. wait(timeout) with a shorter
// timeout only throws; the collective goes on.
//
// What differs from MpiProcessGroup:
//  - Tensors must be on this group's device (device()); CPU tensors throw
//    std::invalid_argument at the call.
//  - allreduce is NCCL's own (Algorithm::automatic or native); asking for one of our
//    algorithms (naive, tree, recursive_doubling, ring) throws std::invalid_argument: they
//    run over MPI (MpiProcessGroup, on device tensors too).
//  - broadcast, reduce, allreduce, allgather and reduce_scatter are NCCL's collectives;
//    gather and scatter are grouped ncclSend/ncclRecv; barrier is an allreduce of one
//    element, complete once every rank has reached it.
//  - f16/bf16 are reduced in their own precision at each step (NCCL), not with f32
//    accumulation. ReduceOp::avg is ncclAvg (integers truncate).
//  - send/recv: NCCL has no tags. Messages between two ranks match in issue order; the tag
//    must be >= 0 and is otherwise ignored, and a length mismatch is not detected.
//  - No checking mode (no fingerprints); counts are not limited to INT_MAX.
//  - Device memory is NCCL's to read: nothing is staged through the host.
//
// In a build without CUDA (kernels/no_cuda.cpp, comm/group/no_nccl.cpp) the constructors throw
// CommError saying so.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/group/queued_process_group.h"

namespace ringflow::comm {

struct NcclProcessGroupOptions {
  // CUDA device of this rank; -1: the local rank modulo the host's device count.
  int device = -1;
  // Deadline of the set-up: the exchanges over a group, and the communicator's creation.
  Timeout timeout = kDefaultTimeout;
};

class NcclProcessGroup final : public QueuedProcessGroup {
 public:
  // Collective over the ranks of `parent` (an MpiBootstrap over it carries the set-up).
  explicit NcclProcessGroup(MPI_Comm parent = MPI_COMM_WORLD, NcclProcessGroupOptions options = {});
  // Collective over the bootstrap's ranks (MpiBootstrap, TcpBootstrap, GroupBootstrap),
  // used during construction only. NCCL ranks are the bootstrap's ranks.
  explicit NcclProcessGroup(Bootstrap& bootstrap, NcclProcessGroupOptions options = {});
  // Collective over the ranks of `group`, which carries the set-up (GroupBootstrap) and
  // may be destroyed afterwards.
  explicit NcclProcessGroup(ProcessGroup& group, NcclProcessGroupOptions options = {});
  // Runs the collectives still queued (each up to its deadline), then frees the
  // communicator (ncclCommFinalize + ncclCommDestroy), or aborts it when the group is
  // broken.
  ~NcclProcessGroup() override;

  std::string backend_name() const override { return "nccl"; }
  bool runs_our_algorithms() const override { return false; }
  int device() const { return device_; }  // the CUDA device index this rank's tensors must be on

 protected:
  void check_device(const char* what, const char* role, Device device) const override;
  // NCCL's own, whatever was asked (allreduce refuses ours).
  Algorithm resolve_allreduce(size_t, Algorithm) const override { return Algorithm::native; }
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
  // Never called: the group has no checking mode.
  std::vector<Fingerprint> exchange_fingerprints(Op& op) override;

 private:
  struct Cuda;  // the communicator, stream and events (nccl_process_group.cpp)
  // What a body queues on the group's stream: NCCL call(s), as an ncclResult_t.
  using Enqueue = std::function<int(void* comm, void* stream)>;

  void init(Bootstrap& bootstrap, const NcclProcessGroupOptions& options);
  // Queues a collective (its tensors, read and written) to run `enqueue` on the
  // communication thread; traffic: what its Work reports.
  std::shared_ptr<Work> enqueue_nccl(Fingerprint fp, const CollectiveOptions& o, const char* call,
                                     std::vector<CollectiveArg> args, Enqueue enqueue,
                                     std::optional<Traffic> traffic = std::nullopt);
  // Queues ncclSend or ncclRecv of t with peer.
  std::shared_ptr<Work> enqueue_nccl_p2p(const Tensor& t, bool send, int peer, int tag,
                                         const CollectiveOptions& o);
  // On the communication thread: issue_and_wait, and on any failure the communicator
  // aborted and a CommError naming the collective and this rank.
  void run_on_stream(Op& op, const char* call, const Enqueue& enqueue);
  // Orders the stream after the inputs, queues the call, polls until it completed; throws
  // on an error, a dead peer or at the deadline.
  void issue_and_wait(Op& op, const char* call, const Enqueue& enqueue);

  int device_ = -1;
  std::unique_ptr<Cuda> cuda_;
  Tensor barrier_buffer_;  // one f32 on device(), the barrier's allreduce
};

}  // namespace ringflow::comm
