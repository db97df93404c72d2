#include "ringflow/kernels/simt/host_backend.h"

#include "ringflow/kernels/simt/batch_norm.h"
#include "ringflow/kernels/simt/elementwise.h"
#include "ringflow/kernels/simt/host_exec.h"
#include "ringflow/kernels/simt/index.h"
#include "ringflow/kernels/simt/optimizer.h"
#include "ringflow/kernels/simt/pool.h"
#include "ringflow/kernels/simt/reduce.h"
#include "ringflow/kernels/simt/softmax.h"

namespace ringflow {

const Backend& simt_host_backend() {
  static const Backend table = [] {
    Backend b = reference_backend();
    b.name = "simt-host";
    simt::set_elementwise_kernels<simt::HostExec>(b);
    simt::set_reduce_kernels<simt::HostExec>(b);
    simt::set_softmax_kernels<simt::HostExec>(b);
    simt::set_index_kernels<simt::HostExec>(b);
    simt::set_pool_kernels<simt::HostExec>(b);
    simt::set_batch_norm_kernels<simt::HostExec>(b);
    simt::set_optimizer_kernels<simt::HostExec>(b);
    return b;
  }();
  return table;
}

}  // namespace ringflow
