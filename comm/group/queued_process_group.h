// QueuedProcessGroup: what every process group shares whatever moves its bytes (MPI, our
// transports, NCCL): the queue and the one communication thread that runs collectives in
// issue order while the caller computes, the sequence numbers, checking mode's
// fingerprints, CUDA tensors staged through host memory (CudaStaging) for backends that
// compute on the host, the broken state after a collective failed part-way, and naming the
// rank whose exit made it fail (PeerWatch). A backend says how each collective runs (a body
// queued with its arguments) and how fingerprints travel.
#pragma once

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/comm/base/backoff.h"
#include "ringflow/comm/group/collective_kind.h"
#include "ringflow/comm/group/cuda_staging.h"
#include "ringflow/comm/group/peer_watch.h"
#include "ringflow/comm/group/process_group.h"

namespace ringflow::comm {

class QueuedProcessGroup : public ProcessGroup {
 public:
  ~QueuedProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool checking() const { return checking_; }
  // Each rank's host, numbered by its first rank (the hierarchical allreduce's layout).
  const std::vector<int>& host_of() const { return host_of_; }
  Traffic allreduce_traffic_model(int64_t count, DType dtype, Algorithm algo) const override;
  // Empty while usable; the reason once a collective timed out or failed part-way.
  std::string broken_reason() const;
  std::chrono::nanoseconds comm_thread_cpu_time() const override;
  void set_comm_thread_cpus(const std::vector<int>& cpus) override;
  std::vector<int> comm_thread_cpus();  // where it may run now
  // Why the ranks of other nodes are not watched for their exit (PeerWatch::unwatched:
  // the liveness links could not be made); empty when they are or there are none.
  std::string peers_unwatched() const { return peers_ ? peers_->unwatched() : ""; }

  // What checking mode compares across ranks before each collective.
  struct Fingerprint {
    int32_t kind = 0;       // CollectiveKind
    int32_t op = 0;         // ReduceOp
    int32_t dtype = 0;      // DType
    int32_t algorithm = 0;  // Algorithm (allreduce only)
    int32_t root = 0;
    int32_t pad = 0;
    int64_t count = 0;      // elements per rank (the block of allgather, scatter, ...)
    int64_t seq = 0;        // sequence number of the collective in this group
    bool operator==(const Fingerprint&) const = default;
  };

 protected:
  // A queued collective or point-to-point operation.
  struct Op {
    std::shared_ptr<Work> work;
    bool collective = true;
    Fingerprint fp;
    Timeout timeout{};
    std::chrono::steady_clock::time_point deadline{};  // set when it starts
    std::vector<CollectiveArg> args;  // bodies use host(i), never the tensors themselves
    std::function<void(Op&)> body;
    StreamEvent inputs_ready;  // recorded at issue: the kernels that produced CUDA inputs

    Buffer host(size_t i) const { return args.at(i).buffer(); }
  };

  // stage_cuda: CUDA tensors go through host memory (CudaStaging) for backends that compute
  // on the host; false for one that reads device memory itself (NCCL), whose bodies then
  // order their work after op.inputs_ready and bump the versions of what they write.
  QueuedProcessGroup(int rank, int size, bool checking, bool stage_cuda = true);
  // Each rank's host (comm/bootstrap/bootstrap.h, host_indices), which the hierarchical
  // allreduce needs; the derived constructor sets it (all ranks on one host until then).
  void set_hosts(std::vector<int> host_of);
  // automatic: hierarchical for large messages when ranks share hosts and there are several
  // hosts; otherwise as ProcessGroup resolves it.
  Algorithm resolve_allreduce(size_t bytes, Algorithm algo) const override;
  // The derived constructor calls start() last, and its destructor stop() first: the
  // thread runs the derived class's bodies.
  void start();
  void stop();

  // Queues a collective (a sequence number of the collectives' count) and returns its Work.
  std::shared_ptr<Work> enqueue_collective(Fingerprint fp, const CollectiveOptions& options,
                                           std::vector<CollectiveArg> args,
                                           std::function<void(Op&)> body);
  // Queues a point-to-point op (numbered apart from the collectives), described by describe.
  std::shared_ptr<Work> enqueue_p2p(std::shared_ptr<Op> op,
                                    const std::function<std::string(int64_t seq)>& describe);

  // Every rank's fingerprint for op, in rank order, by the backend's own messages; throws
  // CommError naming the ranks that did not arrive by op.deadline (and mark_broken()).
  virtual std::vector<Fingerprint> exchange_fingerprints(Op& op) = 0;
  // The derived constructor may give the watch of the other ranks' processes: a collective
  // that fails part-way then names the rank whose exit started it.
  void watch_peers(std::unique_ptr<PeerWatch> watch) { peers_ = std::move(watch); }
  // PeerWatch::dead_peers(); empty without a watch.
  std::string dead_peers() { return peers_ ? peers_->dead_peers() : ""; }
  // Whether dead_peers() ever named a rank (MPI is then finalised by no one: it would wait
  // for the dead). Once the communication thread has stopped.
  bool peer_died() const { return peers_ && peers_->saw_death(); }
  // Says goodbye to the other ranks and waits until each said goodbye too, exited, or was
  // found stopped or hung (PeerWatch::wait_for_goodbyes); at once without a watch. Once the
  // communication thread has stopped.
  void await_goodbyes() {
    if (!peers_) return;
    peers_->say_goodbye();
    peers_->wait_for_goodbyes();
  }
  // Breaks the group (first reason wins); later collectives fail at once. The peers hear
  // that this rank gave up (PeerWatch::give_up).
  void mark_broken(const std::string& reason);
  // The count of threads blocked in this group's Works (comm/base/backoff.h).
  const Waiters* waiters() const { return waiters_.get(); }

  static std::string describe(const Fingerprint& fp);
  static Fingerprint make_fp(CollectiveKind kind, DType dtype, int64_t count,
                             const CollectiveOptions& o);

 private:
  std::vector<int> host_of_;
  std::shared_ptr<Work> enqueue(std::shared_ptr<Op> op,
                                const std::function<std::string(int64_t seq)>& describe_op);
  void run_loop();
  void run(Op& op);
  void check_fingerprints(Op& op);
  // Breaks the group and fails op's Work with e, naming the rank that made it fail.
  void fail(Op& op, const std::exception& e, std::exception_ptr thrown);
  // what, and the ranks whose processes exited, looked for up to a second (a failure
  // spreads along the algorithm's messages faster than some peers see the exit); where none
  // did, the ranks that never began op's collective (PeerWatch::absent_from).
  std::string with_dead_peers(const std::string& what, const Op& op);

  const int rank_, size_;
  const bool checking_;
  const bool stage_cuda_;
  const std::shared_ptr<Waiters> waiters_ = std::make_shared<Waiters>();
  mutable std::mutex mutex_;
  int64_t next_seq_ = 0;  // collectives issued, under mutex_
  int64_t next_p2p_ = 0;  // sends and recvs issued, under mutex_
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<Op>> queue_;
  bool stopping_ = false;
  std::string broken_;      // under mutex_
  CudaStaging staging_;     // comm thread only
  std::unique_ptr<PeerWatch> peers_;  // set before start()
  std::thread thread_;
  clockid_t thread_clock_{};  // thread_'s CPU clock while it runs
};

}  // namespace ringflow::comm
