#include "ringflow/comm/transport/transport.h"

#include "ringflow/comm/base/reduce.h"
#include "ringflow/comm/base/scratch.h"

namespace ringflow::comm {

void Transport::sendrecv_reduce(const void* send_data, size_t send_bytes, int to, void* inout,
                                int64_t count, DType dtype, ReduceOp op, int from) {
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  void* incoming = detail::scratch(bytes);
  sendrecv(send_data, send_bytes, to, incoming, bytes, from);
  reduce_into(inout, incoming, count, dtype, op);
}

}  // namespace ringflow::comm
