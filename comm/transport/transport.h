// Point-to-point byte transport between the ranks of one group: all that the allreduce
// algorithms of comm/ (naive, tree, recursive doubling, ring) need. Blocking calls; an
// implementation must not deadlock on sendrecv with any peer, including itself.
// Implementations: MpiTransport (any MPI communicator), ShmTransport (ranks of one node,
// through shared memory), TcpTransport (ranks on any nodes, through sockets of its own).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "ringflow/comm/base/backoff.h"
#include "ringflow/comm/base/types.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow::comm {

class Transport {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(const void* data, size_t bytes, int peer) = 0;
  virtual void recv(void* data, size_t bytes, int peer) = 0;
  // Sends to `to` and receives from `from` at once (the step of a ring or an exchange).
  virtual void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                        size_t recv_bytes, int from) = 0;
  // sendrecv whose incoming message, `count` elements of `dtype`, is reduced into `inout`
  // (inout[i] = inout[i] op incoming[i], as reduce_into) instead of overwriting it: the
  // reduce-scatter step of a ring. send_data must not overlap inout. The default receives
  // into the calling thread's scratch buffer (comm/base/scratch.h), then reduces, so an algorithm
  // that holds that buffer must not call it; a transport that can read the incoming bytes
  // where they arrive (shared memory) reduces straight from there, in one pass.
  virtual void sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                               int64_t count, DType dtype, ReduceOp op, int from);
  // sendrecv whose received bytes the caller will not read again soon (the last allgather
  // step of a ring over a buffer larger than the cache): a transport that copies them in
  // may write around the cache (non-temporal stores), which spares reading each
  // destination line from memory first. The default is sendrecv.
  virtual void sendrecv_streaming(const void* send_data, size_t send_bytes, int to,
                                  void* recv_data, size_t recv_bytes, int from) {
    sendrecv(send_data, send_bytes, to, recv_data, recv_bytes, from);
  }

  // True when calls to the ranks of this rank's host and calls to the ranks of other hosts
  // may come from two threads at once (each side from one thread at a time): a transport
  // made of a separate one per side (HybridTransport). Lets an algorithm overlap the legs
  // within a host with the legs across hosts.
  virtual bool host_sides_concurrent() const { return false; }
  // Calls that wait past the deadline throw naming the peer they waited for (the process
  // group sets its collective's); Deadline::max() waits for ever, as blocking MPI calls do.
  virtual void set_deadline(Deadline) {}
  // How the blocking calls wait (comm/base/backoff.h): for the waiters of the group whose
  // communication thread makes the calls; null (the default) when the calling thread is
  // itself the one waiting.
  virtual void set_waiters(const Waiters* waiters) { waiters_ = waiters; }

 protected:
  const Waiters* waiters() const { return waiters_; }

 private:
  const Waiters* waiters_ = nullptr;
};

}  // namespace ringflow::comm
