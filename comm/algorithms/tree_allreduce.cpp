// Binomial-tree allreduce: a binomial reduce to rank 0 (in round k, ranks with bit k set
// send to rank - 2^k and drop out), then a binomial broadcast from rank 0 along the same
// tree. 2 ceil(log2 n) steps of the full buffer: fewer messages than naive, but each
// link carries the whole buffer, so for large messages the ring wins.
// The result is computed once, at rank 0, so every rank ends with the same bits.
#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/base/scratch.h"
#include "ringflow/comm/algorithms/check_args.h"

namespace ringflow::comm {

void tree_allreduce(Transport& t, Buffer buf, ReduceOp op) {
  detail::check_args("tree", t, buf);
  const int n = t.size(), rank = t.rank();
  if (n == 1 || buf.count == 0) return;
  const size_t bytes = static_cast<size_t>(buf.count) * dtype_size(buf.dtype);

  // Reduce: children rank + 2^k for every k below the lowest set bit of rank.
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (rank & mask) {
      t.send(buf.data, bytes, rank - mask);
      break;
    }
    if (rank + mask < n) {
      void* incoming = detail::scratch(bytes);
      t.recv(incoming, bytes, rank + mask);
      reduce_into(buf.data, incoming, buf.count, buf.dtype, op);
    }
  }
  if (rank == 0 && op == ReduceOp::avg) finish_average(buf, n);

  // Broadcast: receive from the parent (rank - lowest set bit), then send to the same
  // children, largest subtree first.
  if (rank != 0) t.recv(buf.data, bytes, rank - mask);
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (rank + mask < n) t.send(buf.data, bytes, rank + mask);
  }
}

}  // namespace ringflow::comm
