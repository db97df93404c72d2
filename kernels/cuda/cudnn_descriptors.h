// What the cuDNN kernels (convolutions, batch norm) share: the data type of a dtype, the
// scaling factors in the type cuDNN wants, and an owned tensor descriptor of a View.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cudnn_conv_plan.h"
#include "ringflow/kernels/view.h"

namespace ringflow::cuda {

inline cudnnDataType_t data_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: throw std::invalid_argument(std::string("cuda: no cuDNN type for ") + dtype_name(dt));
  }
}

// alpha = 1, beta = 0 or 1 in the scaling type cuDNN wants (double for f64, else float).
struct Scalars {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  bool is_double;
  explicit Scalars(DType dt) : is_double(dt == DType::f64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return is_double ? static_cast<const void*>(&d0) : &f0; }
};

// A 4-D view that tensor_dims() describes, or a (1, K, 1, 1) bias vector.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  // prefer_nhwc: the layout a view that is both contiguous and channels-last is described in.
  explicit TensorDesc(const View& v, bool prefer_nhwc = false) {
    const TensorDims dims = *tensor_dims(v, prefer_nhwc);
    RF_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    RF_CHECK_CUDNN(cudnnSetTensorNdDescriptor(d, data_type(v.dtype), 4, dims.sizes.data(), dims.strides.data()));
  }
  // (1, K, 1, 1) over a bias vector of stride s.
  TensorDesc(const View& bias, int) {
    const int K = static_cast<int>(bias.shape[0]), s = static_cast<int>(std::max<int64_t>(bias.strides[0], 1));
    const int sizes[4] = {1, K, 1, 1}, strides[4] = {K * s, s, s, s};
    RF_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    RF_CHECK_CUDNN(cudnnSetTensorNdDescriptor(d, data_type(bias.dtype), 4, sizes, strides));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

}  // namespace ringflow::cuda
