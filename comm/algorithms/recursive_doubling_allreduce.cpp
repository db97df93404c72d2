// Recursive-doubling allreduce, latency-optimal for small messages: in round k each rank
// exchanges its whole buffer with rank XOR 2^k and reduces, log2(n) rounds in all.
// A world size that is not a power of two is folded first, as MPICH does: with p the
// largest power of two <= n and rem = n - p, each even rank below 2 rem sends its buffer
// to the odd rank above it and sits out; the p remaining ranks run the rounds; the
// folded-in ranks get the result back at the end (two extra steps).
// Both partners of an exchange add the same two operands (a + b and b + a are the same
// IEEE result), so every rank ends with the same bits.
#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/base/scratch.h"
#include "ringflow/comm/algorithms/check_args.h"

namespace ringflow::comm {

void recursive_doubling_allreduce(Transport& t, Buffer buf, ReduceOp op) {
  detail::check_args("recursive_doubling", t, buf);
  const int n = t.size(), rank = t.rank();
  if (n == 1 || buf.count == 0) return;
  const size_t bytes = static_cast<size_t>(buf.count) * dtype_size(buf.dtype);

  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int rem = n - pof2;
  void* incoming = detail::scratch(bytes);

  // Fold: ranks 0, 2, .., 2 rem - 2 hand their data to ranks 1, 3, .., 2 rem - 1.
  int new_rank;  // rank among the p that run the rounds; -1 for a folded-in rank
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      t.send(buf.data, bytes, rank + 1);
      new_rank = -1;
    } else {
      t.recv(incoming, bytes, rank - 1);
      reduce_into(buf.data, incoming, buf.count, buf.dtype, op);
      new_rank = rank / 2;
    }
  } else {
    new_rank = rank - rem;
  }

  if (new_rank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int new_peer = new_rank ^ mask;
      const int peer = new_peer < rem ? new_peer * 2 + 1 : new_peer + rem;
      t.sendrecv(buf.data, bytes, peer, incoming, bytes, peer);
      reduce_into(buf.data, incoming, buf.count, buf.dtype, op);
    }
    if (op == ReduceOp::avg) finish_average(buf, n);
  }

  // Unfold: the folded-in ranks receive the result from their partner.
  if (rank < 2 * rem) {
    if (rank % 2 == 1) {
      t.send(buf.data, bytes, rank - 1);
    } else {
      t.recv(buf.data, bytes, rank + 1);
    }
  }
}

}  // namespace ringflow::comm
