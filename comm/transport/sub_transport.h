// SubTransport: a Transport over some of another transport's ranks (the ranks of one host,
// the leaders of all hosts), so that an algorithm written for a whole group runs on a part
// of one: rank i of the view is members[i] of the underlying transport.
#pragma once

#include <string>
#include <vector>

#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

class SubTransport final : public Transport {
 public:
  // members: ranks of `inner`, the caller's among them. Borrows inner.
  SubTransport(Transport& inner, std::vector<int> members)
      : inner_(inner),
        members_(std::move(members)),
        rank_(position_among(members_, inner.rank(), "SubTransport")) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  bool host_sides_concurrent() const override { return inner_.host_sides_concurrent(); }
  void set_deadline(Deadline deadline) override { inner_.set_deadline(deadline); }
  void set_waiters(const Waiters* waiters) override { inner_.set_waiters(waiters); }
  void send(const void* data, size_t bytes, int peer) override {
    inner_.send(data, bytes, at(peer));
  }
  void recv(void* data, size_t bytes, int peer) override { inner_.recv(data, bytes, at(peer)); }
  void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from) override {
    inner_.sendrecv(send_data, send_bytes, at(to), recv_data, recv_bytes, at(from));
  }
  void sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                       int64_t count, DType dtype, ReduceOp op, int from) override {
    inner_.sendrecv_reduce(send_data, send_bytes, at(to), inout, count, dtype, op, at(from));
  }
  void sendrecv_streaming(const void* send_data, size_t send_bytes, int to, void* recv_data,
                          size_t recv_bytes, int from) override {
    inner_.sendrecv_streaming(send_data, send_bytes, at(to), recv_data, recv_bytes, at(from));
  }

 private:
  int at(int peer) const { return peer < 0 ? peer : members_.at(static_cast<size_t>(peer)); }

  Transport& inner_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace ringflow::comm
