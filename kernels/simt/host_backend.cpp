#include "kernels/simt/host_backend.h"

#include "kernels/simt/batch_norm.h"
#include "kernels/simt/elementwise.h"
#include "kernels/simt/host_exec.h"
#include "kernels/simt/index.h"
#include "kernels/simt/optimizer.h"
#include "kernels/simt/pool.h"
#include "kernels/simt/reduce.h"
#include "kernels/simt/softmax.h"

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
