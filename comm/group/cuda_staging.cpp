// Note [CUDA tensors over host groups]: MPI's collectives and our algorithms work on host
// memory, so a CUDA tensor is staged: on the communication thread, just before the
// collective, the tensors it reads are copied device -> host into the staging area, and
// after it the tensors it writes are copied back host -> device. Both copies run on a copy
// stream of the device's own (copy_after, kernels/cuda_copy.h), so the training thread
// never waits for them and its kernels keep running: both wait only for an event recorded
// on the compute stream when the collective was issued (the kernels that produced the
// inputs, or last used the memory it writes), not for the backward kernels queued since;
// the Work completes only once the copy back has finished. The staging area is page-locked
// (allocate_pinned_host), one block for all the tensors of a collective, kept and grown (by
// half again, in MiB) for the life of the group: cudaHostAlloc and cudaFreeHost are slow,
// and cudaFreeHost waits for the whole device. A broken group never frees it (MPI may still
// write into it).
#include "ringflow/comm/group/cuda_staging.h"

#include <algorithm>

#include "ringflow/framework/error.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::comm {
namespace {

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

// Each staged tensor's block starts on a 64-byte boundary.
size_t padded(size_t bytes) { return (bytes + 63) / 64 * 64; }

// t's elements at `host`, laid out as t (contiguous).
View host_view(const Tensor& t, void* host) {
  View v = t.kernel_view();
  v.data = host;
  v.derived = nullptr;
  v.version = 0;
  return v;
}

}  // namespace

CudaStaging::~CudaStaging() {
  if (!leaked_) free_pinned_host(area_);
}

void CudaStaging::stage_in(std::vector<CollectiveArg>& args, Work& work, const StreamEvent& ready) {
  size_t need = 0;
  for (const CollectiveArg& a : args) {
    if (a.staged()) need += padded(nbytes(a.tensor));
  }
  // The comm thread's own device, set once and never restored: a CUDA call on a thread with
  // none made current would open a context on GPU 0 (on every rank).
  for (const CollectiveArg& a : args) {
    if (!a.staged()) continue;
    if (device_ != a.tensor.device().index) {
      set_cuda_device(a.tensor.device().index);
      device_ = a.tensor.device().index;
    }
    break;
  }
  if (need > bytes_) {
    constexpr size_t kMiB = size_t{1} << 20;
    const size_t grown = std::max(need, bytes_ + bytes_ / 2);
    const size_t bytes = (grown + kMiB - 1) / kMiB * kMiB;
    work.set_status(cat("allocating ", bytes, " bytes of pinned host memory for staging"));
    free_pinned_host(area_);
    area_ = nullptr;
    bytes_ = 0;
    area_ = allocate_pinned_host(bytes);
    bytes_ = bytes;
  }
  size_t at = 0;
  for (CollectiveArg& a : args) {
    if (!a.tensor.defined()) continue;
    if (!a.staged()) {
      a.host = a.tensor.device().is_cpu() ? a.tensor.raw_data() : nullptr;
      continue;
    }
    a.host = static_cast<char*>(area_) + at;
    at += padded(nbytes(a.tensor));
    if (!a.in) continue;
    work.set_status(cat("copying ", nbytes(a.tensor), " bytes ", a.tensor.device().str(), " -> host"));
    copy_after(host_view(a.tensor, a.host), Device::cpu(), a.tensor.kernel_view(),
               a.tensor.device(), ready);
  }
}

void CudaStaging::stage_out(const std::vector<CollectiveArg>& args, Work& work,
                            const StreamEvent& ready) {
  for (const CollectiveArg& a : args) {
    if (!a.tensor.defined() || !a.out) continue;
    if (a.staged()) {
      work.set_status(cat("copying ", nbytes(a.tensor), " bytes host -> ", a.tensor.device().str()));
      copy_after(a.tensor.kernel_view(), a.tensor.device(), host_view(a.tensor, a.host),
                 Device::cpu(), ready);
    }
    a.tensor.storage()->bump_version();
  }
}

}  // namespace ringflow::comm
