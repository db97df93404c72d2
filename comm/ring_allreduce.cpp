// Ring allreduce: the buffer is cut into n chunks (the first count % n one element
// longer); a reduce-scatter of n-1 steps (in step s rank r sends chunk r-s to r+1,
// receives chunk r-s-1 from r-1 and reduces it in) leaves rank r owning the reduced
// chunk r+1; an allgather of n-1 steps passes the reduced chunks around the ring.
// Each rank sends and receives 2(n-1)/n of the buffer, whatever n: bandwidth-optimal.
//
// Every step is cut into segments of at most segment_bytes, each exchanged with one
// sendrecv, so that a large message streams (the neighbours work on the previous segment
// while this one travels) and the receive buffer stays small and in cache. All ranks cut
// every chunk into the same number of segments (computed from the longest chunk), so the
// two ends of every exchange agree on the number of messages.
// Each chunk is reduced once, along the ring, then copied: every rank ends with the same
// bits. ReduceOp::avg divides each owned chunk once, before the allgather.
#include <algorithm>
#include <cstdint>

#include "comm/allreduce.h"
#include "comm/detail.h"
#include "framework/error.h"

namespace ringflow::comm {

void ring_allreduce(Transport& t, Buffer buf, ReduceOp op, size_t segment_bytes) {
  detail::check_args("ring", t, buf);
  RF_CHECK(segment_bytes > 0, "ring allreduce: segment_bytes must be > 0");
  const int n = t.size(), rank = t.rank();
  if (n == 1 || buf.count == 0) return;

  const size_t esize = dtype_size(buf.dtype);
  auto* data = static_cast<unsigned char*>(buf.data);
  // Chunk c: elements [chunk_begin(c), chunk_begin(c + 1)).
  const int64_t base = buf.count / n, extra = buf.count % n;
  auto chunk_begin = [&](int c) { return c * base + std::min<int64_t>(c, extra); };
  auto chunk_len = [&](int c) { return base + (c < extra ? 1 : 0); };
  auto wrap = [&](int c) { return ((c % n) + n) % n; };

  // Segments: the same count for every chunk; the last ones of a shorter chunk may be
  // empty (a zero-byte exchange keeps both ends in step).
  const int64_t longest = chunk_len(0);
  const int64_t seg_max_elems = std::max<int64_t>(1, static_cast<int64_t>(segment_bytes / esize));
  const int64_t segments = (longest + seg_max_elems - 1) / seg_max_elems;
  const int64_t seg_elems = segments > 0 ? (longest + segments - 1) / segments : 0;
  auto segment = [&](int c, int64_t k, int64_t* begin, int64_t* len) {
    const int64_t first = std::min(k * seg_elems, chunk_len(c));
    const int64_t last = std::min((k + 1) * seg_elems, chunk_len(c));
    *begin = chunk_begin(c) + first;
    *len = last - first;
  };

  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  void* incoming = detail::scratch(static_cast<size_t>(seg_elems) * esize);

  // Reduce-scatter.
  for (int step = 0; step < n - 1; ++step) {
    const int send_chunk = wrap(rank - step), recv_chunk = wrap(rank - step - 1);
    for (int64_t k = 0; k < segments; ++k) {
      int64_t send_begin, send_len, recv_begin, recv_len;
      segment(send_chunk, k, &send_begin, &send_len);
      segment(recv_chunk, k, &recv_begin, &recv_len);
      t.sendrecv(data + send_begin * esize, send_len * esize, right, incoming,
                 recv_len * esize, left);
      reduce_into(data + recv_begin * esize, incoming, recv_len, buf.dtype, op);
    }
  }
  if (op == ReduceOp::avg) {
    const int owned = wrap(rank + 1);
    finish_average({data + chunk_begin(owned) * esize, chunk_len(owned), buf.dtype}, n);
  }

  // Allgather: received segments land in place.
  for (int step = 0; step < n - 1; ++step) {
    const int send_chunk = wrap(rank + 1 - step), recv_chunk = wrap(rank - step);
    for (int64_t k = 0; k < segments; ++k) {
      int64_t send_begin, send_len, recv_begin, recv_len;
      segment(send_chunk, k, &send_begin, &send_len);
      segment(recv_chunk, k, &recv_begin, &recv_len);
      t.sendrecv(data + send_begin * esize, send_len * esize, right,
                 data + recv_begin * esize, recv_len * esize, left);
    }
  }
}

}  // namespace ringflow::comm
