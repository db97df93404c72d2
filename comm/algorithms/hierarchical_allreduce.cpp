// Hierarchical allreduce, as Horovod's and NCCL's on several nodes: the ranks of each host
// reduce to the host's first rank (its leader), the leaders run the ring among themselves,
// and each leader broadcasts the result back within its host. Over a transport that
// reaches the ranks of a host through shared memory and other hosts through the network,
// only the leaders' ring crosses the links, each leader sending 2(h-1)/h of the buffer for h
// hosts, where a flat ring over every rank sends as much from every rank. The result is the
// leaders' ring's, copied: every rank ends with the same bits.
#include <algorithm>
#include <map>
#include <vector>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/algorithms/check_args.h"
#include "ringflow/comm/algorithms/collectives.h"
#include "ringflow/comm/transport/sub_transport.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

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
  if (host.size() > 1) reduce_to_root(host, buf, step_op, /*root=*/0);
  if (leader) {
    SubTransport across(t, leaders);
    ring_allreduce(across, buf, step_op);
    if (op == ReduceOp::avg) finish_average(buf, t.size());
  }
  if (host.size() > 1) broadcast_tree(host, buf, /*root=*/0);
}

}  // namespace ringflow::comm
