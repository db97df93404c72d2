#include "ringflow/framework/data/batch_to_device.h"

#include <cstring>

#include "ringflow/framework/error.h"
#include "ringflow/framework/ops.h"

namespace ringflow::data {

Tensor BatchToDevice::upload(const Tensor& host, PinnedStaging& staging) {
  const Tensor dense = host.contiguous();
  const size_t nbytes = static_cast<size_t>(dense.numel()) * dtype_size(dense.dtype());
  Tensor out = empty(dense.shape(), dense.dtype(), device_);
  if (nbytes == 0) return out;
  std::memcpy(staging.host(nbytes), dense.kernel_view().data, nbytes);
  staging.upload(out.kernel_view().data, nbytes, device_);
  out.storage()->bump_version();
  return out;
}

Batch BatchToDevice::operator()(const Batch& batch) {
  if (device_.is_cpu()) return batch;
  RF_CHECK(batch.images.device().is_cpu() && batch.labels.device().is_cpu(),
           "BatchToDevice: the batch is already on ", batch.images.device().str());
  const int k = 2 * turn_;
  turn_ = 1 - turn_;
  return {upload(batch.images, staging_[k]), upload(batch.labels, staging_[k + 1]), batch.index, batch.skipped};
}

}  // namespace ringflow::data
