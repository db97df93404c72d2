// A 1x1 convolution with stride 1 and no padding as one batched matmul over its channels, so
// that cudnn_conv.cpp can time cuBLAS's GEMM beside cuDNN's candidates. The views are plain
// C++: a host test (tests/gemm_plan_test.cpp) runs them through the GEMM plan against the
// reference convolution, without a GPU; conv1x1_gemm (conv1x1_gemm.cpp) runs them on cuBLAS.
//
// Note [1x1 convolutions as GEMMs]: on an H100 ResNet-50's f32 1x1 convolutions took 106 of
// the step's 186 ms of convolutions at 10-38 TFLOP/s where cuBLAS's sgemm runs at 49
// (docs/cuda.md), so the GEMM competes with cuDNN per shape and wins only where measured
// faster. With (N, C, H, W) in memory each image is a (Cout, Cin) @ (Cin, H*W) product, the
// filter broadcast over the batch: forward and backward-data, while the filter gradient sums
// over the images, which no strided-batched GEMM does. Channels-last the whole batch is one
// (N*H*W, C) matrix, and all three directions are single GEMMs; so NCHW's filter gradient
// runs on channels-last copies of x and dy, which move (Cin + Cout) values per pixel where
// the GEMM does 2 Cin Cout flops: cheap beside cuDNN's 10-26 TFLOP/s on those shapes.
#pragma once

#include <optional>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda/cudnn_conv_plan.h"
#include "ringflow/kernels/view.h"

namespace ringflow::cuda {

// out (B, M, N) = a (B, M, K) @ b (B, K, N), over the convolution's memory.
struct ConvMatmul {
  View out, a, b;
};

namespace detail {
// A 3-D view of v's memory.
inline View view3(const View& v, int64_t batch, int64_t rows, int64_t cols, int64_t batch_stride,
                  int64_t row_stride, int64_t col_stride) {
  View r = v;
  r.shape = {batch, rows, cols};
  r.strides = {batch_stride, row_stride, col_stride};
  r.derived = nullptr;
  return r;
}
}  // namespace detail

// The matmul of direction d (x, w, y: dx / dw / dy as the direction has them, as run_conv
// takes them), or nullopt where the convolution is no plain GEMM: a filter larger than 1x1,
// a stride, padding, an activation not dense in the call's layout (nhwc), or the filter
// gradient of more than one image with (N, C, H, W) in memory (but where x and dy are
// channels-last as well: C = 1 or H = W = 1). Any dtype: which ones take it is the caller's.
inline std::optional<ConvMatmul> conv1x1_matmul(ConvDirection d, const View& x, const View& w, const View& y,
                                                const Conv2dParams& p, bool nhwc) {
  using detail::view3;
  if (x.dim() != 4 || w.dim() != 4 || y.dim() != 4) return std::nullopt;
  if (w.shape[2] != 1 || w.shape[3] != 1 || p.stride_h != 1 || p.stride_w != 1 || p.pad_top || p.pad_bottom ||
      p.pad_left || p.pad_right)
    return std::nullopt;
  const bool last =
      nhwc || (d == ConvDirection::backward_filter && x.is_channels_last() && y.is_channels_last());
  const auto dense = [last](const View& v) { return last ? v.is_channels_last() : v.is_contiguous(); };
  if (!dense(x) || !dense(y) || !(w.is_contiguous() || w.is_channels_last())) return std::nullopt;
  const int64_t N = x.shape[0], Cin = x.shape[1], Cout = w.shape[0], HW = x.shape[2] * x.shape[3];
  // The filter (Cout, Cin) row-major, and its transpose (Cin, Cout) over the same memory.
  const View wk = view3(w, 1, Cout, Cin, 0, Cin, 1), wt = view3(w, 1, Cin, Cout, 0, 1, Cin);
  if (last) {
    const int64_t rows = N * HW;
    const View xm = view3(x, 1, rows, Cin, 0, Cin, 1), ym = view3(y, 1, rows, Cout, 0, Cout, 1);
    switch (d) {
      case ConvDirection::forward: return ConvMatmul{ym, xm, wt};
      case ConvDirection::backward_data: return ConvMatmul{xm, ym, wk};
      case ConvDirection::backward_filter:  // dw = dy^T @ x
        return ConvMatmul{wk, view3(y, 1, Cout, rows, 0, 1, Cout), xm};
    }
    return std::nullopt;
  }
  const View xm = view3(x, N, Cin, HW, Cin * HW, HW, 1), ym = view3(y, N, Cout, HW, Cout * HW, HW, 1);
  const auto over_batch = [N](View v) {  // the filter, the same for every image
    v.shape[0] = N;
    return v;
  };
  switch (d) {
    case ConvDirection::forward: return ConvMatmul{ym, over_batch(wk), xm};
    case ConvDirection::backward_data: return ConvMatmul{xm, over_batch(wt), ym};
    case ConvDirection::backward_filter:  // dw = dy (Cout, HW) @ x^T (HW, Cin) of one image
      if (N == 1) return ConvMatmul{wk, ym, view3(x, 1, HW, Cin, 0, 1, HW)};
      return std::nullopt;
  }
  return std::nullopt;
}

// How conv1x1_gemm runs direction d: not at all, on the operands' memory, or (the filter
// gradient of NCHW images) on channels-last copies of x and dy.
enum class Conv1x1Gemm { none, direct, via_channels_last };
inline Conv1x1Gemm conv1x1_gemm_route(ConvDirection d, const View& x, const View& w, const View& y,
                                      const Conv2dParams& p, bool nhwc) {
  if (conv1x1_matmul(d, x, w, y, p, nhwc)) return Conv1x1Gemm::direct;
  if (d == ConvDirection::backward_filter && x.dim() == 4 && y.dim() == 4 &&
      conv1x1_matmul(d, dense_layout(x, true), w, dense_layout(y, true), p, true))
    return Conv1x1Gemm::via_channels_last;
  return Conv1x1Gemm::none;
}

// Runs direction d as cuBLAS's GEMM where conv1x1_gemm_route has one (conv1x1_gemm.cpp); f32
// on TF32 tensor cores when `tf32`. Throws std::invalid_argument where it has none.
void conv1x1_gemm(ConvDirection d, const View& x, const View& w, const View& y, const Conv2dParams& p, bool nhwc,
                  bool tf32);

}  // namespace ringflow::cuda
