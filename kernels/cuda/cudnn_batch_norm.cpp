// Training batch norm on cuDNN (the legacy cudnnBatchNormalization* API, spatial mode), as
// PyTorch does for 4-D CUDA tensors: the own kernels of kernels/simt/batch_norm.h give each
// channel one block, which leaves most of a large GPU idle on the early, wide layers. cuDNN
// takes 4-D x whose operands share one dense layout, with dense statistics and affine
// parameters in f32 (f64 for f64 x); everything else stays on the own kernels.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the legacy batch norm API of cuDNN 9

#include <climits>
#include <initializer_list>
#include <optional>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/cudnn_descriptors.h"
#include "ringflow/kernels/cuda/cudnn_handle.h"

namespace ringflow::cuda {
namespace {

decltype(Backend::batch_norm_forward_train) own_forward_train = nullptr;
decltype(Backend::batch_norm_backward) own_backward = nullptr;
decltype(Backend::batch_norm_relu_forward_train) own_relu_forward_train = nullptr;
decltype(Backend::batch_norm_relu_backward) own_relu_backward = nullptr;

DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// A dense vector of C statistics or parameters in cuDNN's type for x.
bool takes_vector(const View* v, const View& x) {
  return v && v->dim() == 1 && v->shape[0] == x.shape[1] && v->dtype == stats_dtype(x.dtype) &&
         (v->strides[0] == 1 || v->shape[0] == 1);
}

bool takes(const View& x, std::initializer_list<const View*> like_x,
           std::initializer_list<const View*> vectors, double eps) {
  if (x.dim() != 4 || x.numel() == 0 || x.numel() > INT_MAX || eps < CUDNN_BN_MIN_EPSILON) return false;
  if (x.dtype != DType::f32 && x.dtype != DType::f64 && x.dtype != DType::f16 && x.dtype != DType::bf16)
    return false;
  const auto dims = tensor_dims(x);
  if (!dims) return false;
  for (const View* v : like_x)
    if (v->dtype != x.dtype || v->shape != x.shape || tensor_dims(*v) != dims) return false;
  for (const View* v : vectors)
    if (!takes_vector(v, x)) return false;
  return true;
}

// A dense vector of C statistics on the device, for cuDNN's 1 / sqrt(var + eps).
struct StatsBuffer {
  DeviceBuffer buffer;
  View view;
  explicit StatsBuffer(const View& like)
      : buffer(static_cast<size_t>(like.shape[0]) * dtype_size(like.dtype)), view(like) {
    view.data = buffer.data();
    view.strides = {1};
    view.derived = nullptr;
  }
};

// The descriptor of the per-channel operands, derived from x's.
struct ParamDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit ParamDesc(const TensorDesc& x) {
    RF_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d));
    RF_CHECK_CUDNN(cudnnDeriveBNTensorDescriptor(d, x.d, CUDNN_BATCHNORM_SPATIAL));
  }
  ~ParamDesc() { cudnnDestroyTensorDescriptor(d); }
  ParamDesc(const ParamDesc&) = delete;
  ParamDesc& operator=(const ParamDesc&) = delete;
};

void forward_train(const View& y, const View& mean, const View& var, const View& x,
                   const View* gamma, const View* beta, double eps) {
  if (!takes(x, {&y}, {&mean, &var, gamma, beta}, eps))
    return own_forward_train(y, mean, var, x, gamma, beta, eps);
  const TensorDesc xd(x);
  const ParamDesc pd(xd);
  const Scalars s(x.dtype);
  StatsBuffer invstd(var);
  // No running statistics here (factor 0, null): the framework updates them from mean and var.
  const cudnnStatus_t status = cudnnBatchNormalizationForwardTraining(
      cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), xd.d, x.data, xd.d, y.data, pd.d,
      gamma->data, beta->data, 0.0, nullptr, nullptr, eps, mean.data, invstd.view.data);
  // A shape or dtype cuDNN refuses has written nothing: the own kernels take it.
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return own_forward_train(y, mean, var, x, gamma, beta, eps);
  RF_CHECK_CUDNN(status);
  batch_norm_convert_stats(var, invstd.view, eps, /*to_var=*/true);
}

void backward(const View& dx, const View* dgamma, const View* dbeta, const View& dy, const View& x,
              const View& mean, const View& var, const View* gamma, double eps) {
  if (!takes(x, {&dx, &dy}, {&mean, &var, gamma}, eps) || (dgamma && !takes_vector(dgamma, x)) ||
      (dbeta && !takes_vector(dbeta, x)))
    return own_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, eps);
  const TensorDesc xd(x);
  const ParamDesc pd(xd);
  const Scalars s(x.dtype);
  StatsBuffer invstd(var);
  batch_norm_convert_stats(invstd.view, var, eps, /*to_var=*/false);
  // cuDNN always writes both parameter gradients: scratch for the ones not asked for.
  std::optional<StatsBuffer> no_dgamma, no_dbeta;
  if (!dgamma) no_dgamma.emplace(var);
  if (!dbeta) no_dbeta.emplace(var);
  const cudnnStatus_t status = cudnnBatchNormalizationBackward(
      cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), s.one(), s.zero(), xd.d, x.data,
      xd.d, dy.data, xd.d, dx.data, pd.d, gamma->data, dgamma ? dgamma->data : no_dgamma->view.data,
      dbeta ? dbeta->data : no_dbeta->view.data, eps, mean.data, invstd.view.data);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return own_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, eps);
  RF_CHECK_CUDNN(status);
}

// The fused forms (backend.h's batch_norm_relu_*) around cuDNN's batch norm: its output
// then relu(y + residual) in one own pass; backward: dz = y > 0 ? dy : 0 in one pass (it is
// also dresidual), then cuDNN's backward of dz.
void relu_forward_train(const View& y, const View& mean, const View& var, const View& x, const View* gamma,
                        const View* beta, const View* residual, double eps) {
  if (!takes(x, {&y}, {&mean, &var, gamma, beta}, eps) || (residual && residual->dtype != x.dtype))
    return own_relu_forward_train(y, mean, var, x, gamma, beta, residual, eps);
  forward_train(y, mean, var, x, gamma, beta, eps);
  batch_norm_add_relu(y, residual);
}

void relu_backward(const View& dx, const View* dresidual, const View* dgamma, const View* dbeta,
                   const View& dy, const View& y, const View& x, const View& mean, const View& var,
                   const View* gamma, double eps) {
  if (!takes(x, {&dx, &dy, &y}, {&mean, &var, gamma}, eps) || (dresidual && !takes(x, {dresidual}, {}, eps)))
    return own_relu_backward(dx, dresidual, dgamma, dbeta, dy, y, x, mean, var, gamma, eps);
  std::optional<DeviceBuffer> scratch;
  View dz = x;  // x's dense layout
  if (dresidual) {
    dz = *dresidual;
  } else {
    scratch.emplace(static_cast<size_t>(x.numel()) * dtype_size(x.dtype));
    dz.data = scratch->data();
    dz.derived = nullptr;
  }
  cuda_backend()->binary(BinaryOp::relu_backward, dz, dy, y);
  backward(dx, dgamma, dbeta, dz, x, mean, var, gamma, eps);
}

}  // namespace

void use_cudnn_batch_norm(Backend& b) {
  own_forward_train = b.batch_norm_forward_train;
  own_backward = b.batch_norm_backward;
  own_relu_forward_train = b.batch_norm_relu_forward_train;
  own_relu_backward = b.batch_norm_relu_backward;
  b.batch_norm_forward_train = forward_train;
  b.batch_norm_backward = backward;
  b.batch_norm_relu_forward_train = relu_forward_train;
  b.batch_norm_relu_backward = relu_backward;
}

}  // namespace ringflow::cuda

#pragma GCC diagnostic pop
