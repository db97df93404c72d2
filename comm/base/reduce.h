// The arithmetic every allreduce shares, one layer below the transports (a shared-memory
// transport reduces where the bytes arrive) and the algorithms: a host buffer, dst (op)= src
// element by element, and the final division of ReduceOp::avg.
#pragma once

#include <cstdint>

#include "ringflow/comm/base/types.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow::comm {

struct Buffer {
  void* data;
  int64_t count;
  DType dtype;
};

// dst[i] = dst[i] (op) src[i] for count elements (sum for avg); f16/bf16 through f32.
void reduce_into(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op);
// For ReduceOp::avg: divides the buffer by the world size, after the sum.
void finish_average(Buffer buf, int world_size);

}  // namespace ringflow::comm
