// The kinds of collective and the one-line description
// every backend puts in its errors and Works, e.g. "allreduce #5 (f32, 1000 elements, sum,
// ring)", so that MPI and NCCL failures read alike.
#pragma once

#include <cstdint>
#include <string>

#include "ringflow/comm/base/types.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow::comm {

enum class CollectiveKind : int32_t {
  broadcast, reduce, allreduce, allgather, reduce_scatter, gather, scatter, barrier
};

const char* kind_name(CollectiveKind kind);
bool reduces(CollectiveKind kind);  // takes a ReduceOp
bool rooted(CollectiveKind kind);   // takes a root

// "<kind> #<seq> (<dtype>, <count> elements[, <op>][, <algorithm>][, root <root>])"; a
// barrier is "barrier #<seq>". The algorithm is named for allreduce only.
std::string describe_collective(CollectiveKind kind, int64_t seq, DType dtype, int64_t count,
                                ReduceOp op, Algorithm algorithm, int root);

}  // namespace ringflow::comm
