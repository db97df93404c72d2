// The allreduce algorithms of our own, each in its own file, built on a Transport, plus
// the choice among them. In place on a host buffer of `count` elements of `dtype`;
// f16/bf16 are accumulated in f32 at every addition. ReduceOp::avg divides once, at the end.
// Every algorithm leaves the same bits on every rank (each element is reduced once, or by
// both partners from the same operands), as data-parallel replicas need.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "ringflow/comm/base/reduce.h"
#include "ringflow/comm/base/types.h"
#include "ringflow/comm/transport/transport.h"

namespace ringflow::comm {

void naive_allreduce(Transport& t, Buffer buf, ReduceOp op, int root = 0);  // gather-scatter
void tree_allreduce(Transport& t, Buffer buf, ReduceOp op);                 // binomial tree
void recursive_doubling_allreduce(Transport& t, Buffer buf, ReduceOp op);
// Reduce-scatter then allgather over size() chunks (uneven handled), each step pipelined in
// segments of at most segment_bytes so that large messages stream.
void ring_allreduce(Transport& t, Buffer buf, ReduceOp op, size_t segment_bytes = 1 << 20);

// host_of[r]: rank r's host. Within each host a reduce to its first rank (the leader), our
// ring among the leaders, a broadcast back within each host: only the leaders talk across
// hosts. In chunks, the legs within hosts overlapping the leaders' ring, where the transport
// allows (Note [pipelined hierarchical] in hierarchical_allreduce.cpp).
void hierarchical_allreduce(Transport& t, Buffer buf, ReduceOp op, const std::vector<int>& host_of);

// What Algorithm::automatic resolves to for this message and world size: one of ours.
Algorithm choose_allreduce(size_t bytes, int world_size);

// The algorithm `algo` (automatic resolved by choose_allreduce; native is not ours and
// throws std::invalid_argument). host_of: each rank's host, which hierarchical needs.
void run_allreduce(Transport& t, Buffer buf, Algorithm algo, ReduceOp op, int root = 0,
                   const std::vector<int>* host_of = nullptr);

}  // namespace ringflow::comm
