#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

void run_allreduce(Transport& t, Buffer buf, Algorithm algo, ReduceOp op, int root,
                   const std::vector<int>* host_of) {
  if (algo == Algorithm::automatic) {
    algo = choose_allreduce(static_cast<size_t>(buf.count) * dtype_size(buf.dtype), t.size());
  }
  switch (algo) {
    case Algorithm::naive: naive_allreduce(t, buf, op, root); return;
    case Algorithm::tree: tree_allreduce(t, buf, op); return;
    case Algorithm::recursive_doubling: recursive_doubling_allreduce(t, buf, op); return;
    case Algorithm::ring: ring_allreduce(t, buf, op); return;
    case Algorithm::hierarchical:
      RF_CHECK(host_of, "run_allreduce: the hierarchical allreduce needs each rank's host");
      hierarchical_allreduce(t, buf, op, *host_of);
      return;
    case Algorithm::automatic:
    case Algorithm::native: break;
  }
  RF_CHECK(false, "run_allreduce: '", algorithm_name(algo),
           "' is not one of our algorithms (naive, tree, recursive_doubling, ring, hierarchical)");
}

}  // namespace ringflow::comm
