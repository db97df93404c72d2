#include "ringflow/comm/transport/hybrid_transport.h"

#include <future>
#include <map>

#include "ringflow/comm/bootstrap/sub_bootstrap.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

std::unique_ptr<HybridTransport> HybridTransport::create(Bootstrap& bootstrap,
                                                         std::vector<int> host_of,
                                                         const ShmTransportOptions& shm_options,
                                                         const TcpTransportOptions& tcp_options,
                                                         std::string* why_not) {
  const int rank = bootstrap.rank(), n = bootstrap.size();
  RF_CHECK(static_cast<int>(host_of.size()) == n, "HybridTransport: ", host_of.size(),
           " host ids for ", n, " ranks");
  std::vector<int> members, local_of(n);
  std::map<int, int> ranks_on;
  for (int r = 0; r < n; ++r) {
    local_of[r] = ranks_on[host_of[r]]++;
    if (host_of[r] == host_of[rank]) members.push_back(r);
  }
  // Every host makes its own at once: each ShmTransport::create makes the same exchanges.
  SubBootstrap host(bootstrap, members);
  std::string why_not_shm;
  std::unique_ptr<ShmTransport> shm = ShmTransport::create(host, shm_options, &why_not_shm);
  const std::vector<std::string> outcomes = bootstrap.allgather(shm ? "" : why_not_shm);
  for (int r = 0; r < n; ++r) {
    if (outcomes[r].empty()) continue;
    if (why_not) *why_not = cat("shared memory on the host of rank ", r, ": ", outcomes[r]);
    return nullptr;
  }
  std::unique_ptr<TcpTransport> tcp = TcpTransport::create(bootstrap, tcp_options, why_not);
  if (!tcp) return nullptr;
  return std::unique_ptr<HybridTransport>(
      new HybridTransport(std::move(shm), std::move(tcp), std::move(host_of), std::move(local_of)));
}

HybridTransport::HybridTransport(std::unique_ptr<ShmTransport> shm, std::unique_ptr<TcpTransport> tcp,
                                 std::vector<int> host_of, std::vector<int> local_of)
    : shm_(std::move(shm)),
      tcp_(std::move(tcp)),
      host_of_(std::move(host_of)),
      local_of_(std::move(local_of)) {}

void HybridTransport::set_deadline(Deadline deadline) {
  shm_->set_deadline(deadline);
  tcp_->set_deadline(deadline);
}

void HybridTransport::set_waiters(const Waiters* waiters) {
  shm_->set_waiters(waiters);
  tcp_->set_waiters(waiters);
}

Transport& HybridTransport::part(int peer) const {
  RF_CHECK(peer < size(), "HybridTransport on rank ", rank(), ": peer ", peer,
           " outside a group of ", size());
  if (peer >= 0 && local(peer)) return *shm_;
  return *tcp_;
}

template <typename Receive>
void HybridTransport::split(const void* send_data, size_t send_bytes, int to, Receive&& receive) {
  Transport& out = part(to);
  const int peer = in_part(to);
  auto sending = std::async(std::launch::async, [&] { out.send(send_data, send_bytes, peer); });
  try {
    receive();
  } catch (...) {
    // The send ends when its peer reads, fails, or the deadline passes; its error is
    // the second one, so the receive's is the one to report.
    try {
      sending.get();
    } catch (...) {
    }
    throw;
  }
  sending.get();
}

void HybridTransport::send(const void* data, size_t bytes, int peer) {
  part(peer).send(data, bytes, in_part(peer));
}

void HybridTransport::recv(void* data, size_t bytes, int peer) {
  part(peer).recv(data, bytes, in_part(peer));
}

void HybridTransport::sendrecv(const void* send_data, size_t send_bytes, int to, void* recv_data,
                               size_t recv_bytes, int from) {
  if (!mixed(to, from)) {
    part(to >= 0 ? to : from)
        .sendrecv(send_data, send_bytes, in_part(to), recv_data, recv_bytes, in_part(from));
    return;
  }
  split(send_data, send_bytes, to,
        [&] { part(from).recv(recv_data, recv_bytes, in_part(from)); });
}

void HybridTransport::sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                                      int64_t count, DType dtype, ReduceOp op, int from) {
  if (!mixed(to, from)) {
    part(to >= 0 ? to : from)
        .sendrecv_reduce(send_data, send_bytes, in_part(to), inout, count, dtype, op, in_part(from));
    return;
  }
  split(send_data, send_bytes, to, [&] {
    part(from).sendrecv_reduce(nullptr, 0, -1, inout, count, dtype, op, in_part(from));
  });
}

void HybridTransport::sendrecv_streaming(const void* send_data, size_t send_bytes, int to,
                                         void* recv_data, size_t recv_bytes, int from) {
  if (!mixed(to, from)) {
    part(to >= 0 ? to : from)
        .sendrecv_streaming(send_data, send_bytes, in_part(to), recv_data, recv_bytes, in_part(from));
    return;
  }
  split(send_data, send_bytes, to, [&] {
    part(from).sendrecv_streaming(nullptr, 0, -1, recv_data, recv_bytes, in_part(from));
  });
}

}  // namespace ringflow::comm
