// The data loader's batches on the training device. On a CUDA device each batch is copied
// through page-locked staging buffers without waiting (kernels/cuda_copy.h PinnedStaging):
// the copy is queued on the device's compute stream, so the forward pass that follows sees
// the data while the host goes on to load the next batch. Two buffers per tensor alternate,
// so a batch's buffer is reused only after its copy has finished. On the CPU the batch is
// handed back as it is.
#pragma once

#include <array>

#include "ringflow/framework/data/data_loader.h"
#include "ringflow/kernels/cuda_copy.h"

namespace ringflow::data {

class BatchToDevice {
 public:
  explicit BatchToDevice(Device device) : device_(device) {}
  Batch operator()(const Batch& batch);
  Device device() const { return device_; }

 private:
  Tensor upload(const Tensor& host, PinnedStaging& staging);
  Device device_;
  std::array<PinnedStaging, 4> staging_;  // (images, labels) x 2, alternating
  int turn_ = 0;
};

}  // namespace ringflow::data
