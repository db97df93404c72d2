// Point-to-point byte transport between the ranks of one group: all that the allreduce
// algorithms of comm/ (naive, tree, recursive doubling, ring) need. Blocking calls; an
// implementation must not deadlock on sendrecv with any peer, including itself.
#pragma once

#include <cstddef>

namespace ringflow::comm {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(const void* data, size_t bytes, int peer) = 0;
  virtual void recv(void* data, size_t bytes, int peer) = 0;
  // Sends to `to` and receives from `from` at once (the step of a ring or an exchange).
  virtual void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                        size_t recv_bytes, int from) = 0;
};

}  // namespace ringflow::comm
