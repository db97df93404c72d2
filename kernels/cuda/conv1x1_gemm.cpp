// A 1x1 convolution's GEMM on cuBLAS (Note [1x1 convolutions as GEMMs] in conv1x1_gemm.h).
#include "ringflow/kernels/cuda/conv1x1_gemm.h"

#include <cassert>
#include <optional>

#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow::cuda {
namespace {

// A dense channels-last copy of v in `buffer`.
View channels_last_copy(const View& v, std::optional<DeviceBuffer>& buffer) {
  View d = channels_last_like(v);
  buffer.emplace(static_cast<size_t>(v.numel()) * dtype_size(v.dtype));
  d.data = buffer->data();
  copy(d, v);
  return d;
}

}  // namespace

void conv1x1_gemm(ConvDirection d, const View& x, const View& w, const View& y, const Conv2dParams& p, bool nhwc) {
  if (const auto m = conv1x1_matmul(d, x, w, y, p, nhwc)) return matmul(m->out, m->a, m->b);
  // The filter gradient of NCHW operands: one GEMM over the whole batch channels-last.
  assert(d == ConvDirection::backward_filter);
  std::optional<DeviceBuffer> xb, yb;
  const auto m = conv1x1_matmul(d, channels_last_copy(x, xb), w, channels_last_copy(y, yb), p, true);
  assert(m);
  matmul(m->out, m->a, m->b);
}

}  // namespace ringflow::cuda
