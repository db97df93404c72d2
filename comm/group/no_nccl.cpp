// NcclProcessGroup in builds without CUDA (-Dcuda=disabled or nvcc not found): constructing
// one throws CommError saying why; there is nothing else to reach.
#include <stdexcept>

#include "ringflow/comm/group/nccl_process_group.h"

namespace ringflow::comm {
namespace {

[[noreturn]] void no_nccl() {
  throw CommError(
      "NcclProcessGroup: ringflow was built without CUDA (-Dcuda=disabled or nvcc not found), "
      "so without NCCL; MpiProcessGroup runs the same collectives on CPU tensors");
}

}  // namespace

struct NcclProcessGroup::Cuda {};

NcclProcessGroup::NcclProcessGroup(MPI_Comm, NcclProcessGroupOptions)
    : QueuedProcessGroup(0, 1, false, false) { no_nccl(); }
NcclProcessGroup::NcclProcessGroup(Bootstrap&, NcclProcessGroupOptions)
    : QueuedProcessGroup(0, 1, false, false) { no_nccl(); }
NcclProcessGroup::NcclProcessGroup(ProcessGroup&, NcclProcessGroupOptions)
    : QueuedProcessGroup(0, 1, false, false) { no_nccl(); }
NcclProcessGroup::~NcclProcessGroup() = default;
void NcclProcessGroup::check_device(const char*, const char*, Device) const { no_nccl(); }
std::vector<QueuedProcessGroup::Fingerprint> NcclProcessGroup::exchange_fingerprints(Op&) { no_nccl(); }

std::shared_ptr<Work> NcclProcessGroup::do_broadcast(const Tensor&, const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_reduce(const Tensor&, const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_allreduce(const Tensor&, const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_allgather(const Tensor&, const Tensor&,
                                                     const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_reduce_scatter(const Tensor&, const Tensor&,
                                                          const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_gather(const Tensor&, const Tensor&,
                                                  const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_scatter(const Tensor&, const Tensor&,
                                                   const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_barrier(const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_send(const Tensor&, int, int, const CollectiveOptions&) { no_nccl(); }
std::shared_ptr<Work> NcclProcessGroup::do_recv(const Tensor&, int, int, const CollectiveOptions&) { no_nccl(); }

}  // namespace ringflow::comm
