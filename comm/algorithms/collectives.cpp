#include "ringflow/comm/algorithms/collectives.h"

#include <cstring>
#include <vector>


namespace ringflow::comm {
namespace {

size_t bytes_of(Buffer b) { return static_cast<size_t>(b.count) * dtype_size(b.dtype); }
unsigned char* block(Buffer b, int64_t i, int64_t m) {
  return static_cast<unsigned char*>(b.data) + static_cast<size_t>(i * m) * dtype_size(b.dtype);
}

// memcpy of n bytes: a collective of empty tensors passes null data, which memcpy must not
// be given even for 0 bytes (UBSan reports it).
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

}  // namespace

void broadcast_tree(Transport& t, Buffer b, int root) {
  const int n = t.size(), vr = (t.rank() - root + n) % n;
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (vr & mask) {
      t.recv(b.data, bytes_of(b), (vr - mask + root) % n);
      break;
    }
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) t.send(b.data, bytes_of(b), (vr + mask + root) % n);
  }
}

void reduce_to_root(Transport& t, Buffer b, ReduceOp op, int root) {
  const int n = t.size();
  if (t.rank() != root) {
    t.send(b.data, bytes_of(b), root);
    return;
  }
  std::vector<unsigned char> incoming(bytes_of(b));
  for (int q = 0; q < n; ++q) {
    if (q == root) continue;
    t.recv(incoming.data(), incoming.size(), q);
    reduce_into(b.data, incoming.data(), b.count, b.dtype, op);
  }
  if (op == ReduceOp::avg) finish_average(b, n);
}

void allgather_ring(Transport& t, Buffer out, Buffer in) {
  const int n = t.size(), r = t.rank();
  const int64_t m = in.count;
  const size_t bytes = bytes_of(in);
  copy_bytes(block(out, r, m), in.data, bytes);
  for (int s = 0; s < n - 1; ++s) {
    const int send = ((r - s) % n + n) % n, recv = ((r - s - 1) % n + n) % n;
    t.sendrecv(block(out, send, m), bytes, (r + 1) % n, block(out, recv, m), bytes, (r + n - 1) % n);
  }
}

void reduce_scatter_ring(Transport& t, Buffer out, Buffer in, ReduceOp op) {
  const int n = t.size(), r = t.rank();
  const int64_t m = out.count;
  const size_t bytes = bytes_of(out);
  std::vector<unsigned char> work(bytes_of(in));
  copy_bytes(work.data(), in.data, work.size());
  const Buffer w{work.data(), in.count, in.dtype};
  for (int s = 0; s < n - 1; ++s) {
    const int send = ((r - s - 1) % n + n) % n, reduce = ((r - s - 2) % n + n) % n;
    t.sendrecv_reduce(block(w, send, m), bytes, (r + 1) % n, block(w, reduce, m), m, in.dtype, op,
                      (r + n - 1) % n);
  }
  copy_bytes(out.data, block(w, r, m), bytes);
  if (op == ReduceOp::avg) finish_average(out, n);
}

void gather_to_root(Transport& t, Buffer out, Buffer in, int root) {
  if (t.rank() != root) return t.send(in.data, bytes_of(in), root);
  for (int q = 0; q < t.size(); ++q) {
    if (q == root) {
      copy_bytes(block(out, q, in.count), in.data, bytes_of(in));
    } else {
      t.recv(block(out, q, in.count), bytes_of(in), q);
    }
  }
}

void scatter_from_root(Transport& t, Buffer out, Buffer in, int root) {
  if (t.rank() != root) return t.recv(out.data, bytes_of(out), root);
  for (int q = 0; q < t.size(); ++q) {
    if (q == root) {
      copy_bytes(out.data, block(in, q, out.count), bytes_of(out));
    } else {
      t.send(block(in, q, out.count), bytes_of(out), q);
    }
  }
}

void barrier_dissemination(Transport& t) {
  const int n = t.size(), r = t.rank();
  for (int k = 1; k < n; k <<= 1) t.sendrecv(nullptr, 0, (r + k) % n, nullptr, 0, (r - k + n) % n);
}

}  // namespace ringflow::comm
