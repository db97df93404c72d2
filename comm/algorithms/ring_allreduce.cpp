// Ring allreduce: the buffer is cut into n chunks (the first count % n one element
// longer); a reduce-scatter of n-1 steps (in step s rank r sends chunk r-s to r+1,
// receives chunk r-s-1 from r-1 and reduces it in) leaves rank r owning the reduced
// chunk r+1; an allgather of n-1 steps passes the reduced chunks around the ring.
// Each rank sends and receives 2(n-1)/n of the buffer, whatever n: bandwidth-optimal.
//
// Note [ring segments]: every chunk is cut into the same number of segments of at most
// segment_bytes (computed from the longest chunk; the last ones of a shorter chunk may be
// empty: a zero-byte exchange keeps both ends in step), and the ring runs segment by
// segment: segment k goes through all 2(n-1) steps (reduce-scatter, then allgather)
// before segment k+1 starts. What a rank sends in step s+1 is what it reduced (or
// received) in step s, so it is sent while still in cache, not read back from memory: at
// 2 ranks each rank reads the half it sends once, reads and writes the half it reduces
// once, and writes the half that comes back once, the memory traffic of one memcpy of the
// buffer. A segment's reduce-scatter steps go through Transport::sendrecv_reduce, which
// reduces straight from shared memory on a ShmTransport. Every rank exchanges the same
// messages in the same order with its two neighbours, so the order cannot deadlock, and
// the receive buffer (if any) stays the size of a segment. What the last allgather step
// lands is not read again in the call; in a buffer larger than the cache keeps
// (detail::streaming_from_bytes) it goes through Transport::sendrecv_streaming, which
// writes around the cache on a ShmTransport (faster for large buffers, slower for one that
// would stay in cache for the next call: docs/allreduce.md).
// Each chunk is reduced once, along the ring, then copied: every rank ends with the same
// bits. ReduceOp::avg divides each segment of the owned chunk once, before its allgather.
#include <algorithm>
#include <cstdint>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/base/scratch.h"
#include "ringflow/comm/algorithms/check_args.h"
#include "ringflow/framework/error.h"

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

  // Segments: the same count for every chunk (Note [ring segments]).
  const int64_t longest = chunk_len(0);
  const int64_t seg_max_elems = std::max<int64_t>(1, static_cast<int64_t>(segment_bytes / esize));
  const int64_t segments = (longest + seg_max_elems - 1) / seg_max_elems;
  const int64_t seg_elems = segments > 0 ? (longest + segments - 1) / segments : 0;
  struct Segment {
    unsigned char* data;
    int64_t count;  // elements
    size_t bytes;
  };
  auto segment = [&](int c, int64_t k) {
    const int64_t first = std::min(k * seg_elems, chunk_len(c));
    const int64_t last = std::min((k + 1) * seg_elems, chunk_len(c));
    return Segment{data + (chunk_begin(c) + first) * esize, last - first,
                   static_cast<size_t>(last - first) * esize};
  };

  const bool streaming = static_cast<size_t>(buf.count) * esize >= detail::streaming_from_bytes();
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  for (int64_t k = 0; k < segments; ++k) {
    // Reduce-scatter: step s sends chunk r-s (reduced in step s-1) and reduces in chunk r-s-1.
    for (int step = 0; step < n - 1; ++step) {
      const Segment out = segment(wrap(rank - step), k), in = segment(wrap(rank - step - 1), k);
      t.sendrecv_reduce(out.data, out.bytes, right, in.data, in.count, buf.dtype, op, left);
    }
    if (op == ReduceOp::avg) {
      const Segment owned = segment(wrap(rank + 1), k);
      finish_average({owned.data, owned.count, buf.dtype}, n);
    }
    // Allgather: step s sends chunk r+1-s (received in step s-1); received segments land
    // in place.
    for (int step = 0; step < n - 1; ++step) {
      const Segment out = segment(wrap(rank + 1 - step), k), in = segment(wrap(rank - step), k);
      if (streaming && step == n - 2) {
        t.sendrecv_streaming(out.data, out.bytes, right, in.data, in.bytes, left);
      } else {
        t.sendrecv(out.data, out.bytes, right, in.data, in.bytes, left);
      }
    }
  }
}

}  // namespace ringflow::comm
