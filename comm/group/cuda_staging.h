// CudaStaging: how a group that works on host memory (MPI, our transports) takes CUDA
// tensors: through page-locked host memory, copied on the device's copy stream after the
// event recorded when the collective was issued. See Note [CUDA tensors over host groups]
// in cuda_staging.cpp. Used by the communication thread only.
#pragma once

#include <cstddef>
#include <vector>

#include "ringflow/comm/base/reduce.h"
#include "ringflow/comm/group/work.h"
#include "ringflow/framework/tensor.h"
#include "ringflow/kernels/cuda_copy.h"

namespace ringflow::comm {

// A tensor argument of a collective and the host memory that the backend reads and writes
// for it: the tensor's own for a CPU tensor, a block of the staging area for a CUDA tensor.
struct CollectiveArg {
  Tensor tensor;         // undefined: none on this rank (gather's output off the root)
  bool in = false;       // read by the collective on this rank
  bool out = false;      // written by it on this rank
  void* host = nullptr;  // set by CudaStaging::stage_in
  bool staged() const { return tensor.defined() && tensor.device().is_cuda() && (in || out); }
  Buffer buffer() const {
    return tensor.defined() ? Buffer{host, tensor.numel(), tensor.dtype()} : Buffer{nullptr, 0, DType::f32};
  }
};

class CudaStaging {
 public:
  CudaStaging() = default;
  ~CudaStaging();  // frees the staging area, unless leak() was called
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  // Points every argument at host memory, copying the CUDA tensors that the collective
  // reads into the staging area after `ready`. Sets the Work's status while it waits.
  void stage_in(std::vector<CollectiveArg>& args, Work& work, const StreamEvent& ready);
  // Copies the staged tensors that the collective wrote back to their devices, and bumps
  // the version of every tensor it wrote.
  void stage_out(const std::vector<CollectiveArg>& args, Work& work, const StreamEvent& ready);
  // A broken group's backend may still write into the area: never free it.
  void leak() { leaked_ = true; }

 private:
  void* area_ = nullptr;  // pinned host memory
  size_t bytes_ = 0;
  int device_ = -1;       // the CUDA device current on the communication thread
  bool leaked_ = false;
};

}  // namespace ringflow::comm
