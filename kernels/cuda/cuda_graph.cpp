// CudaGraph (kernels/cuda_graph.h) over the CUDA runtime's stream capture, and the stream
// this thread's work goes to (compute_stream, cuda_kernels.h).
#include "ringflow/kernels/cuda_graph.h"

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow {
namespace cuda {
namespace {

thread_local cudaStream_t t_capture_stream = nullptr;  // null: no capture on this thread

}  // namespace

CUstream_st* compute_stream() { return t_capture_stream ? t_capture_stream : cudaStreamLegacy; }

}  // namespace cuda

struct CudaGraph::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;  // the capture's
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  uint64_t pool = 0;  // the allocator's private pool for the graph
  bool capturing = false;

  void drop() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
    if (pool) cuda::release_private_pool(device, pool);
    pool = 0;
  }
};

CudaGraph::CudaGraph(int device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  const cuda::DeviceGuard on(device);
  RF_CHECK_CUDA(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
}

CudaGraph::~CudaGraph() {
  if (impl_->capturing) {
    try {
      capture_end();
    } catch (...) {  // the capture is abandoned either way
    }
  }
  const cuda::DeviceGuard on(impl_->device);
  (void)cudaStreamSynchronize(cudaStreamLegacy);  // replays done before the pool is reused
  impl_->drop();
  (void)cudaStreamDestroy(impl_->stream);
}

void CudaGraph::capture_begin() {
  if (impl_->capturing || cuda::t_capture_stream)
    throw std::logic_error("CudaGraph::capture_begin: a capture is under way on this thread already");
  const cuda::DeviceGuard on(impl_->device);
  impl_->drop();
  // The capture's first kernels read what the legacy stream's queued work writes.
  cudaEvent_t ready = nullptr;
  RF_CHECK_CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  RF_CHECK_CUDA(cudaEventRecord(ready, cudaStreamLegacy));
  RF_CHECK_CUDA(cudaStreamWaitEvent(impl_->stream, ready, 0));
  (void)cudaEventDestroy(ready);
  impl_->pool = cuda::begin_private_pool(impl_->device);
  const cudaError_t status = cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    cuda::end_private_pool(impl_->device);
    impl_->drop();
    RF_CHECK_CUDA(status);
  }
  cuda::t_capture_stream = impl_->stream;
  impl_->capturing = true;
}

void CudaGraph::capture_end() {
  if (!impl_->capturing) throw std::logic_error("CudaGraph::capture_end without capture_begin");
  const cuda::DeviceGuard on(impl_->device);
  impl_->capturing = false;
  cuda::t_capture_stream = nullptr;
  cuda::end_private_pool(impl_->device);
  const cudaError_t status = cudaStreamEndCapture(impl_->stream, &impl_->graph);
  if (status != cudaSuccess || !impl_->graph) {
    (void)cudaGetLastError();
    impl_->graph = nullptr;
    impl_->drop();
    throw std::runtime_error(std::string("CUDA graph capture failed: ") + cudaGetErrorString(status));
  }
  const cudaError_t made = cudaGraphInstantiate(&impl_->exec, impl_->graph, 0);
  if (made != cudaSuccess) {
    (void)cudaGetLastError();
    impl_->exec = nullptr;
    impl_->drop();
    throw std::runtime_error(std::string("CUDA graph instantiation failed: ") + cudaGetErrorString(made));
  }
}

void CudaGraph::replay() {
  if (!impl_->exec) throw std::logic_error("CudaGraph::replay before a successful capture");
  const cuda::DeviceGuard on(impl_->device);
  RF_CHECK_CUDA(cudaGraphLaunch(impl_->exec, cudaStreamLegacy));
}

bool CudaGraph::captured() const { return impl_->exec != nullptr; }

}  // namespace ringflow
