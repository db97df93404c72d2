// Timing on the device for the searches that keep the fastest way to run a shape (cuDNN's
// convolution plans, batch norm on channels-last): CUDA events around a few runs on the
// legacy default stream, where those calls go outside a graph capture.
#pragma once

#include <algorithm>

#include "ringflow/kernels/cuda/check.h"

namespace ringflow::cuda {

// A CUDA event, destroyed with its scope.
struct Event {
  cudaEvent_t e = nullptr;
  Event() { RF_CHECK_CUDA(cudaEventCreate(&e)); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

// run's time, ms: the better of two runs after a warm-up (cuDNN's own searches time their
// algorithms the same way).
template <class Run>
float time_best_of_two(const Run& run) {
  run();
  Event start, stop;
  float best = 0;
  for (int i = 0; i < 2; ++i) {
    RF_CHECK_CUDA(cudaEventRecord(start.e, cudaStreamLegacy));
    run();
    RF_CHECK_CUDA(cudaEventRecord(stop.e, cudaStreamLegacy));
    RF_CHECK_CUDA(cudaEventSynchronize(stop.e));
    float ms = 0;
    RF_CHECK_CUDA(cudaEventElapsedTime(&ms, start.e, stop.e));
    best = i == 0 ? ms : std::min(best, ms);
  }
  return best;
}

}  // namespace ringflow::cuda
