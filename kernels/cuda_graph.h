// CUDA Graphs (torch.cuda.CUDAGraph): the work a piece of host code queues on a CUDA device,
// captured once and replayed with one launch, which saves the host the hundreds of kernel
// launches of a training step. While a graph captures on a thread, ringflow's kernels and
// its cuBLAS and cuDNN calls on that thread go to a stream of the graph's own (the legacy
// default stream, where they run otherwise, cannot be captured), and the device's caching
// allocator serves that thread's requests from a private pool that lives as long as the
// graph (Note [Private pools for CUDA graphs] in caching_allocator.h). Replays run on the
// legacy default stream, in order with the work around them.
//
// A capture records kernels, it runs none. What it may not contain, and then capture_end
// throws with CUDA's reason: a synchronisation with the host (a .item(), a copy to or from
// host memory: they wait on the capturing stream, which CUDA refuses). Work queued on other
// streams is not captured (relaxed mode: the allocator's cudaMalloc and event calls go on).
// The host values a kernel takes (an optimizer's learning rate, a shape) are those of the
// capture at every replay.
#pragma once

#include <memory>

namespace ringflow {

class CudaGraph {
 public:
  explicit CudaGraph(int device);  // throws std::runtime_error in a build without CUDA
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void capture_begin();  // on the calling thread
  // Ends the capture whatever happened; throws std::runtime_error when CUDA refused it (the
  // graph then holds nothing and its memory pool is released).
  void capture_end();
  void replay();  // throws std::logic_error before a successful capture
  bool captured() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringflow
