// A 1x1 convolution's GEMM on cuBLAS (Note [1x1 convolutions as GEMMs] in conv1x1_gemm.h).
#include "ringflow/kernels/cuda/conv1x1_gemm.h"

#include <optional>
#include <stdexcept>

#include "ringflow/kernels/cuda/cuda_kernels.h"

namespace ringflow::cuda {
namespace {

// A dense channels-last copy of v in `buffer`.
View channels_last_copy(const View& v, std::optional<DeviceBuffer>& buffer) {
  const View d = allocate_for(dense_layout(v, /*last=*/true), buffer);
  copy(d, v);
  return d;
}

}  // namespace

void conv1x1_gemm(ConvDirection d, const View& x, const View& w, const View& y, const Conv2dParams& p, bool nhwc,
                  bool tf32) {
  std::optional<DeviceBuffer> xb, yb;
  std::optional<ConvMatmul> m = conv1x1_matmul(d, x, w, y, p, nhwc);
  // The filter gradient of NCHW images: one GEMM over the whole batch channels-last.
  if (!m && conv1x1_gemm_route(d, x, w, y, p, nhwc) == Conv1x1Gemm::via_channels_last)
    m = conv1x1_matmul(d, channels_last_copy(x, xb), w, channels_last_copy(y, yb), p, true);
  if (!m)
    throw std::invalid_argument("cuda conv1x1_gemm: x " + shape_str(x.shape) + " w " + shape_str(w.shape) +
                                " y " + shape_str(y.shape) + " is no 1x1 stride-1 unpadded convolution on dense operands");
  matmul(m->out, m->a, m->b, tf32);
}

}  // namespace ringflow::cuda
