// ProcessGroup: a fixed set of ranks that run collectives on framework tensors.
//
// The contract (every backend keeps it; see Note [collective order]):
//  - Collectives are asynchronous: each call checks its arguments, queues the collective
//    and returns a Work handle at once; the tensors are read and written later (on the
//    backend's communication thread, or its CUDA stream) until the Work completes. The
//    caller must not touch them before wait() (the Work keeps their storage alive).
//  - Membership is fixed: rank() and size() never change for the life of the group.
//  - Every rank issues the same collectives in the same order, with matching dtypes and
//    counts (checking mode verifies this at run time). send/recv pairs must be issued in
//    matching order too, as with blocking MPI_Send/MPI_Recv.
//  - Collectives run in issue order, one at a time; their Works complete in that order.
//  - Tensors are contiguous, of dtype f32, f64, f16, bf16, i32 or i64, of any count
//    including 0, on a device the backend takes (MPI: the CPU, or a CUDA device, staged
//    through host memory; NCCL: the group's CUDA device); the tensors of one call share a
//    device. f16/bf16 reduce with f32 accumulation (NCCL: see its header). Anything else
//    throws std::invalid_argument at the call, before anything is queued.
//  - A collective that does not complete within options.timeout fails its Work with a
//    CommError naming the collective, its sequence number and, where knowable, the ranks
//    that did not arrive (or that exited: PeerWatch, comm/group/peer_watch.h). A group whose collective timed out or failed part-way is broken:
//    later collectives fail at once (other ranks may be anywhere in it); make a new group
//    to go on. A mismatch found by checking mode fails only that collective.
//
// Note [collective order]: collectives are matched across ranks by their position in
// the sequence each rank issues (the sequence number, from 0 per group), not by any tag.
// A rank that skips or reorders one makes every later one pair with the wrong partner;
// checking mode exchanges a fingerprint (kind, reduce op, dtype, count, root, sequence
// number) before each collective so that this is an error instead of corrupt data.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/base/traffic.h"
#include "ringflow/comm/base/types.h"
#include "ringflow/comm/group/work.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::comm {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;  // "mpi", "nccl"

  // tensor: in place; the root's values end on every rank.
  std::shared_ptr<Work> broadcast(const Tensor& tensor, const CollectiveOptions& options = {});
  // tensor: in place on the root (op over every rank's tensor); unchanged elsewhere.
  std::shared_ptr<Work> reduce(const Tensor& tensor, const CollectiveOptions& options = {});
  // tensor: in place on every rank; options.algorithm picks the implementation.
  std::shared_ptr<Work> allreduce(const Tensor& tensor, const CollectiveOptions& options = {});
  // input: (m) elements per rank; output: (size() * m), rank r's input at [r*m, (r+1)*m).
  std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input,
                                  const CollectiveOptions& options = {});
  // input: (size() * m); output: (m), rank r gets op over every rank's block r.
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       const CollectiveOptions& options = {});
  // input: (m) on every rank; output: (size() * m) on the root, rank-major as allgather.
  // Other ranks may pass an undefined output.
  std::shared_ptr<Work> gather(const Tensor& output, const Tensor& input,
                               const CollectiveOptions& options = {});
  // input: (size() * m) on the root (undefined elsewhere allowed); output: (m), block r.
  std::shared_ptr<Work> scatter(const Tensor& output, const Tensor& input,
                                const CollectiveOptions& options = {});
  std::shared_ptr<Work> barrier(const CollectiveOptions& options = {});
  // Point to point, matched by (peer, tag) in issue order; options.timeout applies.
  std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag = 0,
                             const CollectiveOptions& options = {});
  std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag = 0,
                             const CollectiveOptions& options = {});

  // What allreduce(count elements of dtype, algo) moves at this rank by the closed forms of
  // comm/base/traffic.h, with algo resolved as allreduce resolves it: what reports set
  // beside the bytes the transport counted.
  virtual Traffic allreduce_traffic_model(int64_t count, DType dtype, Algorithm algo) const;

  // The CPU time the group's communication thread has used since it started (its thread
  // CPU clock: running collectives, waiting between them, everything); zero for a group
  // without one. Any thread may ask, at any time: the difference over a training step is
  // what the step's communication cost the CPUs.
  virtual std::chrono::nanoseconds comm_thread_cpu_time() const { return {}; }
  // Restricts the communication thread to the CPUs `cpus` (non-empty; sched_setaffinity's
  // numbering, comm/base/cpu_affinity.h). Throws std::invalid_argument naming a CPU the
  // process may not use, or where the group has no such thread.
  virtual void set_comm_thread_cpus(const std::vector<int>& cpus);

 protected:
  ProcessGroup() = default;
  // Throws std::invalid_argument naming `what` and `role` unless this backend takes tensors
  // on `device`. Called for every tensor argument before do_*. The default takes the CPU.
  virtual void check_device(const char* what, const char* role, Device device) const;
  // The algorithm allreduce runs for `bytes` when asked for `algo`: by default automatic is
  // choose_allreduce's pick, the others as asked.
  virtual Algorithm resolve_allreduce(size_t bytes, Algorithm algo) const;
  // Called after the arguments were checked against the contract above (including the
  // sizes that one rank can check: output = size() * input, root and peer in range).
  virtual std::shared_ptr<Work> do_broadcast(const Tensor& tensor, const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_reduce(const Tensor& tensor, const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_allreduce(const Tensor& tensor, const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_allgather(const Tensor& output, const Tensor& input,
                                             const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(const Tensor& output, const Tensor& input,
                                                  const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_gather(const Tensor& output, const Tensor& input,
                                          const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_scatter(const Tensor& output, const Tensor& input,
                                           const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_barrier(const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_send(const Tensor& tensor, int peer, int tag,
                                        const CollectiveOptions&) = 0;
  virtual std::shared_ptr<Work> do_recv(const Tensor& tensor, int peer, int tag,
                                        const CollectiveOptions&) = 0;
};

}  // namespace ringflow::comm
