// CountingTransport: forwards to another Transport and counts the bytes this rank sends
// and receives through it, so that the process group reports what an algorithm actually
// moved (comm/base/traffic.h) whichever transport carried it (MPI or shared memory).
#pragma once

#include <atomic>

#include "ringflow/comm/base/traffic.h"
#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

class CountingTransport final : public Transport {
 public:
  explicit CountingTransport(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  bool host_sides_concurrent() const override { return inner_.host_sides_concurrent(); }
  void set_deadline(Deadline deadline) override { inner_.set_deadline(deadline); }
  void set_waiters(const Waiters* waiters) override { inner_.set_waiters(waiters); }
  void send(const void* data, size_t bytes, int peer) override {
    inner_.send(data, bytes, peer);
    count(bytes, 0);
  }
  void recv(void* data, size_t bytes, int peer) override {
    inner_.recv(data, bytes, peer);
    count(0, bytes);
  }
  void sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                size_t recv_bytes, int from) override {
    inner_.sendrecv(send_data, send_bytes, to, recv_data, recv_bytes, from);
    count(send_bytes, recv_bytes);
  }
  void sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                       int64_t count_elems, DType dtype, ReduceOp op, int from) override {
    inner_.sendrecv_reduce(send_data, send_bytes, to, inout, count_elems, dtype, op, from);
    count(send_bytes, static_cast<size_t>(count_elems) * dtype_size(dtype));
  }
  void sendrecv_streaming(const void* send_data, size_t send_bytes, int to, void* recv_data,
                          size_t recv_bytes, int from) override {
    inner_.sendrecv_streaming(send_data, send_bytes, to, recv_data, recv_bytes, from);
    count(send_bytes, recv_bytes);
  }

  Traffic traffic() const { return {sent_.load(), received_.load(), /*measured=*/true}; }

 private:
  // Atomic: an algorithm may drive both sides of a host_sides_concurrent() transport at once.
  void count(size_t sent, size_t received) {
    sent_ += static_cast<int64_t>(sent);
    received_ += static_cast<int64_t>(received);
  }

  Transport& inner_;
  std::atomic<int64_t> sent_{0}, received_{0};
};

}  // namespace ringflow::comm
