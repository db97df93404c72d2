// The CUDA caching allocator with real streams (builds with CUDA only: it calls the CUDA
// runtime itself): a block used on another stream (cuda_record_stream) is not reused
// before that stream's work completes. Work on the other stream is held back by a host
// function that waits for the test, so the check does not depend on timing. Skips with the
// reason where there is no device.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <atomic>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/tests/cuda_skip.h"

namespace ringflow {
namespace {

void require_cuda(cudaError_t status) { REQUIRE_MESSAGE(status == cudaSuccess, cudaGetErrorString(status)); }

// Blocks the stream it is queued on until `released` is set.
void CUDART_CB hold_stream(void* released) {
  while (!static_cast<std::atomic<bool>*>(released)->load()) {
  }
}

}  // namespace

TEST_CASE("a block used on another stream is reused only after that stream's work" *
          doctest::skip(kNoDevice)) {
  set_cuda_device(0);
  const Backend& cuda = *cuda_backend();
  cudaStream_t side = nullptr;
  require_cuda(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::atomic<bool> released{false};
  require_cuda(cudaLaunchHostFunc(side, hold_stream, &released));

  const size_t bytes = 4096;
  void* p = cuda.allocate(bytes);
  void* keep = cuda.allocate(bytes);  // the block after p: p cannot merge with the tail
  cuda_record_stream(p, side);
  cuda_record_stream(p, nullptr);  // the legacy stream is its own: no effect
  cuda.deallocate(p, bytes);       // an event is recorded on `side`, which is held

  void* q = cuda.allocate(bytes);
  CHECK(q != p);
  released = true;
  require_cuda(cudaStreamSynchronize(side));
  void* r = cuda.allocate(bytes);  // the event has completed: p is the best fit again
  CHECK(r == p);

  // Freed while in use on `side`, then the cache emptied: empty_cache waits for `side`.
  released = false;
  require_cuda(cudaLaunchHostFunc(side, hold_stream, &released));
  cuda_record_stream(r, side);
  for (void* x : {q, r, keep}) cuda.deallocate(x, bytes);
  released = true;
  cuda_empty_cache();
  require_cuda(cudaStreamSynchronize(side));
  require_cuda(cudaStreamDestroy(side));
}

}  // namespace ringflow
