#include "ringflow/comm/group/collective_kind.h"

#include "ringflow/framework/error.h"

namespace ringflow::comm {

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::reduce: return "reduce";
    case CollectiveKind::allreduce: return "allreduce";
    case CollectiveKind::allgather: return "allgather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::gather: return "gather";
    case CollectiveKind::scatter: return "scatter";
    case CollectiveKind::barrier: return "barrier";
  }
  return "?";
}

bool reduces(CollectiveKind k) {
  return k == CollectiveKind::reduce || k == CollectiveKind::allreduce ||
         k == CollectiveKind::reduce_scatter;
}

bool rooted(CollectiveKind k) {
  return k == CollectiveKind::broadcast || k == CollectiveKind::reduce ||
         k == CollectiveKind::gather || k == CollectiveKind::scatter;
}

std::string describe_collective(CollectiveKind kind, int64_t seq, DType dtype, int64_t count,
                                ReduceOp op, Algorithm algorithm, int root) {
  std::string s = cat(kind_name(kind), " #", seq);
  if (kind == CollectiveKind::barrier) return s;
  s += cat(" (", dtype_name(dtype), ", ", count, " elements");
  if (reduces(kind)) s += cat(", ", reduce_op_name(op));
  if (kind == CollectiveKind::allreduce) s += cat(", ", algorithm_name(algorithm));
  if (rooted(kind)) s += cat(", root ", root);
  return s + ")";
}

}  // namespace ringflow::comm
