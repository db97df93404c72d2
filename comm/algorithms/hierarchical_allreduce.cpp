// Hierarchical allreduce, as Horovod's and NCCL's on several nodes: the ranks of each host
// reduce to the host's first rank (its leader), the leaders run the ring among themselves,
// and each leader broadcasts the result back within its host. Over a transport that
// reaches the ranks of a host through shared memory and other hosts through the network,
// only the leaders' ring crosses the links, each leader sending 2(h-1)/h of the buffer for h
// hosts, where a flat ring over every rank sends as much from every rank. The result is the
// leaders' ring's, copied: every rank ends with the same bits.
//
// Note [pipelined hierarchical]: one after the other, the legs within a host add their time
// to the link's. Where the transport lets the two sides be driven at once
// (host_sides_concurrent), a large buffer goes in chunks: each leader's own thread runs the
// ring over chunk c while the calling thread reduces chunk c+1 from the host's ranks, and
// broadcasts chunk c once its ring is done. Every rank still makes the same calls in the
// same order on each side, and the bytes are the same as unchunked.
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/algorithms/check_args.h"
#include "ringflow/comm/algorithms/collectives.h"
#include "ringflow/comm/transport/sub_transport.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

constexpr int64_t kChunkBytes = int64_t{4} << 20;

Buffer chunk(Buffer buf, int64_t c, int64_t per_chunk) {
  const int64_t begin = c * per_chunk, count = std::min(per_chunk, buf.count - begin);
  return {static_cast<char*>(buf.data) + begin * static_cast<int64_t>(dtype_size(buf.dtype)),
          count, buf.dtype};
}

// How far each of the leader's two threads has come, and the first failure of either.
class Progress {
 public:
  void advance(int64_t& counter) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counter;
    }
    cv_.notify_all();
  }
  void fail(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = e;
    }
    cv_.notify_all();
  }
  // Waits until counter > c; false when the other thread failed first.
  bool wait_past(const int64_t& counter, int64_t c) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return counter > c || error_; });
    return counter > c;
  }
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  int64_t reduced = 0, ringed = 0;  // chunks done by each leg; under mu_

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::exception_ptr error_;
};

// Note [pipelined hierarchical], on a leader: the ring on a thread of its own.
void pipelined_leader(Transport& host, Transport& across, Buffer buf, ReduceOp step_op,
                      ReduceOp op, int world, int64_t per_chunk, int64_t chunks) {
  Progress p;
  std::thread ring([&] {
    try {
      for (int64_t c = 0; c < chunks; ++c) {
        if (!p.wait_past(p.reduced, c)) return;
        ring_allreduce(across, chunk(buf, c, per_chunk), step_op);
        if (op == ReduceOp::avg) finish_average(chunk(buf, c, per_chunk), world);
        p.advance(p.ringed);
      }
    } catch (...) {
      p.fail(std::current_exception());
    }
  });
  try {
    for (int64_t c = 0; c < chunks; ++c) {
      reduce_to_root(host, chunk(buf, c, per_chunk), step_op, /*root=*/0);
      p.advance(p.reduced);
    }
    for (int64_t c = 0; c < chunks; ++c) {
      if (!p.wait_past(p.ringed, c)) break;
      broadcast_tree(host, chunk(buf, c, per_chunk), /*root=*/0);
    }
  } catch (...) {
    p.fail(std::current_exception());
  }
  ring.join();
  if (std::exception_ptr e = p.error()) std::rethrow_exception(e);
}

}  // namespace

void hierarchical_allreduce(Transport& t, Buffer buf, ReduceOp op, const std::vector<int>& host_of) {
  detail::check_args("hierarchical", t, buf);
  RF_CHECK(static_cast<int>(host_of.size()) == t.size(), "hierarchical allreduce: ",
           host_of.size(), " host ids for ", t.size(), " ranks");
  if (t.size() == 1 || buf.count == 0) return;
  // The ranks of each host, in rank order; the first is its leader.
  std::map<int, std::vector<int>> hosts;
  for (int r = 0; r < t.size(); ++r) hosts[host_of[r]].push_back(r);
  std::vector<int> leaders;
  for (const auto& [host, ranks] : hosts) leaders.push_back(ranks.front());
  std::sort(leaders.begin(), leaders.end());
  const std::vector<int>& mine = hosts.at(host_of[t.rank()]);
  const bool leader = mine.front() == t.rank();

  // avg: summed all the way, divided once by the whole world at the leaders.
  const ReduceOp step_op = op == ReduceOp::avg ? ReduceOp::sum : op;
  SubTransport host(t, mine);
  // Every rank decides alike: the inputs are the same everywhere. Chunks of a multiple of
  // the leaders' count (but the last) split into the ring's pieces as the whole buffer
  // does, so that every rank moves the bytes of the unchunked algorithm.
  const auto h = static_cast<int64_t>(leaders.size());
  const int64_t per_chunk =
      std::max<int64_t>(h, kChunkBytes / static_cast<int64_t>(dtype_size(buf.dtype)) / h * h);
  const int64_t chunks = (buf.count + per_chunk - 1) / per_chunk;
  const bool every_host_shared = std::all_of(hosts.begin(), hosts.end(),
                                             [](const auto& host_ranks) { return host_ranks.second.size() > 1; });
  if (t.host_sides_concurrent() && leaders.size() > 1 && every_host_shared && chunks > 1) {
    if (!leader) {
      for (int64_t c = 0; c < chunks; ++c) reduce_to_root(host, chunk(buf, c, per_chunk), step_op, 0);
      for (int64_t c = 0; c < chunks; ++c) broadcast_tree(host, chunk(buf, c, per_chunk), 0);
      return;
    }
    SubTransport across(t, leaders);
    pipelined_leader(host, across, buf, step_op, op, t.size(), per_chunk, chunks);
    return;
  }
  if (host.size() > 1) reduce_to_root(host, buf, step_op, /*root=*/0);
  if (leader) {
    SubTransport across(t, leaders);
    ring_allreduce(across, buf, step_op);
    if (op == ReduceOp::avg) finish_average(buf, t.size());
  }
  if (host.size() > 1) broadcast_tree(host, buf, /*root=*/0);
}

}  // namespace ringflow::comm
