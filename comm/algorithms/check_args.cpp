#include "ringflow/comm/algorithms/check_args.h"

#include "ringflow/framework/error.h"

namespace ringflow::comm::detail {

void check_args(const char* algorithm, const Transport& t, Buffer buf, int root) {
  RF_CHECK(buf.count >= 0, algorithm, " allreduce: negative count ", buf.count);
  RF_CHECK(buf.count == 0 || buf.data != nullptr, algorithm,
           " allreduce: null buffer with count ", buf.count);
  RF_CHECK(root >= 0 && root < t.size(), algorithm, " allreduce: root ", root,
           " outside the group of ", t.size(), " ranks");
}

}  // namespace ringflow::comm::detail
