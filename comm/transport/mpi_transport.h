// A Transport over an MPI communicator: blocking MPI_Send / MPI_Recv / MPI_Sendrecv of
// bytes on one tag, any size (messages over 1 GiB go as several, in order). It does not
// own the communicator: give it one of your own (MPI_Comm_dup) so that its messages never
// match anyone else's, and free it after the transport. Thread-safety is MPI's: calls from
// one thread at a time per communicator (the process group's communication thread).
// A failed MPI call, or a message of another length than expected, throws
// std::runtime_error naming the call, the peer and this rank.
// With a deadline (the process group passes its collective's), every call polls its
// non-blocking requests instead of blocking, and throws std::runtime_error naming the
// peer that did not arrive once the deadline passes; its requests are then left pending
// (the caller must treat the communicator as broken).
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <string>

#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

class MpiTransport final : public Transport {
 public:
  static constexpr int kDefaultTag = 4242;

  explicit MpiTransport(MPI_Comm comm, int tag = kDefaultTag,
                        Deadline deadline = Deadline::max());

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }
  void set_deadline(Deadline deadline) override { deadline_ = deadline; }
  // Asked every kLivenessPeriod while a call with a deadline waits: a non-empty answer
  // (which peers died, as PeerWatch says) fails the call with it, since MPI never reports a
  // dead peer.
  void set_liveness(std::function<std::string()> dead_peers) { dead_peers_ = std::move(dead_peers); }

  void send(const void* data, size_t bytes, int peer) override;
  void recv(void* data, size_t bytes, int peer) override;
  void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from) override;

 private:
  // Waits for n requests (peers[i]: the rank of requests[i]), blocking or until deadline_.
  void complete(int n, MPI_Request* requests, MPI_Status* statuses, const int* peers,
                const char* call);

  MPI_Comm comm_;
  int tag_;
  Deadline deadline_;
  std::function<std::string()> dead_peers_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace ringflow::comm
