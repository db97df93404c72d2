// Naive allreduce, the "gather-scatter" baseline of data-parallel studies: every rank
// sends its whole buffer to the root, the root reduces them in rank order, then sends the
// result back to each rank in turn. The root moves 2(n-1) full buffers, so time grows
// linearly with the world size: kept as the baseline the other algorithms are measured
// against, not for use.
#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/base/scratch.h"
#include "ringflow/comm/algorithms/check_args.h"

namespace ringflow::comm {

void naive_allreduce(Transport& t, Buffer buf, ReduceOp op, int root) {
  detail::check_args("naive", t, buf, root);
  const int n = t.size(), rank = t.rank();
  if (n == 1 || buf.count == 0) return;
  const size_t bytes = static_cast<size_t>(buf.count) * dtype_size(buf.dtype);

  if (rank != root) {
    t.send(buf.data, bytes, root);
    t.recv(buf.data, bytes, root);
    return;
  }
  void* incoming = detail::scratch(bytes);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == root) continue;
    t.recv(incoming, bytes, peer);
    reduce_into(buf.data, incoming, buf.count, buf.dtype, op);
  }
  if (op == ReduceOp::avg) finish_average(buf, n);
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) t.send(buf.data, bytes, peer);
  }
}

}  // namespace ringflow::comm
