// Training batch norm on cuDNN (the legacy cudnnBatchNormalization* API, spatial mode), as
// PyTorch does for 4-D CUDA tensors, or on the own kernels of kernels/simt/batch_norm.h,
// whichever was faster on the first call of each shape and layout (Note [Batch norm on
// channels-last]). cuDNN takes 4-D x whose operands share one dense layout, with dense
// statistics and affine parameters in f32 (f64 for f64 x); everything else stays on the own
// kernels.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the legacy batch norm API of cuDNN 9

#include <climits>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/cudnn_descriptors.h"
#include "ringflow/kernels/cuda/cudnn_handle.h"
#include "ringflow/kernels/cuda/event_timer.h"
#include "ringflow/kernels/cudnn_choices.h"

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

// Note [Batch norm on channels-last]
// cuDNN's spatial batch norm over a channels-last x (the layout of 16-bit convolutions) runs
// far slower than its memory traffic allows: on an H100 (2026-11-26, bf16, x (256, 64, 32, 32))
// forward 2.53 ms, persistent mode 1.49, spatial on an NCHW copy 0.50 (backward 3.93, 2.13,
// 0.78), where reading and writing the operands takes ~0.05. So each channels-last op (plain
// or fused with relu) times the ways it has on the first call of each shape and keeps the
// fastest: spatial, spatial on an NCHW copy of the operands copied back, and the own kernels
// (coalesced for channels innermost, the relu fused: Note [Batch norm with channels
// innermost] in kernels/simt/batch_norm.h). Persistent mode is left out: never the fastest
// there, and cuDNN documents that it may overflow into NaN without an error. Each way writes
// only its outputs, so a run can be repeated; not while a CUDA graph is being captured (the
// warm-up's choice serves it, else spatial) or when an output aliases an input.
// Contiguous NCHW operands time spatial against the own kernels too (their planes path, one
// block per (n, c) plane): cuDNN's spatial kernels plus the separate relu pass took 75 of the
// 273 ms of ResNet-50's f32 step on an H100 (2026-11-27, docs/cuda.md).
// cudnn_batch_norm_choices() lists the times.
enum class Way { spatial, via_nchw, own };

const char* way_name(Way w) {
  switch (w) {
    case Way::spatial: return "spatial";
    case Way::via_nchw: return "spatial on an NCHW copy";
    case Way::own: return "own kernels";
  }
  return "?";
}

// A dense NCHW copy of an operand in scratch memory (filled from it, or to be copied back).
struct NchwCopy {
  DeviceBuffer buffer;
  View view;
  NchwCopy(const View& of, bool fill) : buffer(static_cast<size_t>(of.numel()) * dtype_size(of.dtype)), view(of) {
    view.data = buffer.data();
    view.strides = contiguous_strides(of.shape);
    view.derived = nullptr;
    if (fill) copy(view, of);
  }
};

struct WayKey {
  std::string op;  // and the layouts of operands other than x, where they may differ
  bool nhwc;
  int device;
  Shape shape;
  DType dtype;
  auto operator<=>(const WayKey&) const = default;
};

struct WayCache {
  std::mutex mutex;
  std::map<WayKey, Way> chosen;
  std::vector<std::string> lines;
};
WayCache& way_cache() {
  static auto* cache = new WayCache;  // never destroyed, as the handles
  return *cache;
}

// This thread's work goes to a CUDA graph's capture (compute_stream, cuda_kernels.h).
bool capturing() { return compute_stream() != cudaStreamLegacy; }

// The way for x's shape and layout (contiguous NCHW or channels-last; else spatial): the
// cached choice, or, on a miss, each way run by `run` (false where cuDNN refuses it) and
// timed, the fastest kept.
template <class Run>
Way choose_way(const char* op, const View& x, bool may_repeat, const Run& run) {
  const bool nchw = x.is_contiguous();
  if (!nchw && !x.is_channels_last()) return Way::spatial;
  int device = 0;
  RF_CHECK_CUDA(cudaGetDevice(&device));
  const WayKey key{op, !nchw, device, x.shape, x.dtype};
  WayCache& cache = way_cache();
  {
    std::lock_guard lock(cache.mutex);
    if (const auto it = cache.chosen.find(key); it != cache.chosen.end()) return it->second;
  }
  if (!may_repeat || capturing()) return Way::spatial;  // untimed: the way that always served
  std::string line =
      std::string(op) + " " + dtype_name(x.dtype) + " x " + shape_str(x.shape) + (nchw ? " nchw:" : " nhwc:");
  Way best = Way::spatial;
  float best_ms = -1;
  for (const Way w : {Way::spatial, Way::via_nchw, Way::own}) {
    if (nchw && w == Way::via_nchw) continue;  // it is NCHW already
    bool ok = true;
    float ms = 0;
    try {
      ms = time_best_of_two([&] { ok = ok && run(w); });
    } catch (const std::runtime_error&) {
      // A cuDNN status other than not-supported refuses this way; a fault of the device
      // (sticky) ends the search.
      if (cudaPeekAtLastError() != cudaSuccess) throw;
      ok = false;
    }
    line += " ";
    line += way_name(w);
    line += ok ? " " : " refused;";
    if (ok) line += std::to_string(ms) + " ms;";
    if (ok && (best_ms < 0 || ms < best_ms)) best = w, best_ms = ms;
  }
  line += " chose ";
  line += way_name(best);
  std::lock_guard lock(cache.mutex);
  cache.chosen.emplace(key, best);
  cache.lines.push_back(line);
  return best;
}

bool aliases(const View& a, const View& b) { return a.data == b.data; }

// cuDNN's forward in `way`; false where it refuses the operands (nothing written then).
bool cudnn_forward(Way way, const View& y, const View& mean, const View& var, const View& x,
                   const View& gamma, const View& beta, double eps) {
  if (way == Way::via_nchw) {
    NchwCopy xt(x, /*fill=*/true), yt(y, /*fill=*/false);
    if (!cudnn_forward(Way::spatial, yt.view, mean, var, xt.view, gamma, beta, eps)) return false;
    copy(y, yt.view);
    return true;
  }
  const TensorDesc xd(x);
  const ParamDesc pd(xd);
  const Scalars s(x.dtype);
  StatsBuffer invstd(var);
  // No running statistics here (factor 0, null): the framework updates them from mean and var.
  const cudnnStatus_t status = cudnnBatchNormalizationForwardTraining(
      cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), xd.d, x.data, xd.d, y.data, pd.d, gamma.data,
      beta.data, 0.0, nullptr, nullptr, eps, mean.data, invstd.view.data);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return false;
  RF_CHECK_CUDNN(status);
  batch_norm_convert_stats(var, invstd.view, eps, /*to_var=*/true);
  return true;
}

// cuDNN's backward in `way` (both parameter gradients written); false where it refuses.
bool cudnn_backward(Way way, const View& dx, const View& dgamma, const View& dbeta, const View& dy,
                    const View& x, const View& mean, const View& var, const View& gamma, double eps) {
  if (way == Way::via_nchw) {
    NchwCopy dxt(dx, /*fill=*/false), dyt(dy, /*fill=*/true), xt(x, /*fill=*/true);
    if (!cudnn_backward(Way::spatial, dxt.view, dgamma, dbeta, dyt.view, xt.view, mean, var, gamma, eps))
      return false;
    copy(dx, dxt.view);
    return true;
  }
  const TensorDesc xd(x);
  const ParamDesc pd(xd);
  const Scalars s(x.dtype);
  StatsBuffer invstd(var);
  batch_norm_convert_stats(invstd.view, var, eps, /*to_var=*/false);
  const cudnnStatus_t status = cudnnBatchNormalizationBackward(
      cudnn_handle(), CUDNN_BATCHNORM_SPATIAL, s.one(), s.zero(), s.one(), s.zero(), xd.d, x.data, xd.d, dy.data, xd.d,
      dx.data, pd.d, gamma.data, dgamma.data, dbeta.data, eps, mean.data, invstd.view.data);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return false;
  RF_CHECK_CUDNN(status);
  return true;
}

// cuDNN always writes both parameter gradients: scratch for the ones not asked for.
struct ParamGrads {
  std::optional<StatsBuffer> no_dgamma, no_dbeta;
  View dgamma, dbeta;
  ParamGrads(const View* dg, const View* db, const View& like) {
    if (!dg) no_dgamma.emplace(like);
    if (!db) no_dbeta.emplace(like);
    dgamma = dg ? *dg : no_dgamma->view;
    dbeta = db ? *db : no_dbeta->view;
  }
};

void forward_train(const View& y, const View& mean, const View& var, const View& x,
                   const View* gamma, const View* beta, double eps) {
  const auto own = [&] { own_forward_train(y, mean, var, x, gamma, beta, eps); };
  if (!takes(x, {&y}, {&mean, &var, gamma, beta}, eps)) return own();
  const auto run = [&](Way w) {
    if (w != Way::own) return cudnn_forward(w, y, mean, var, x, *gamma, *beta, eps);
    own();
    return true;
  };
  // A shape or dtype cuDNN refuses has written nothing: the own kernels take it.
  if (!run(choose_way("forward", x, !aliases(y, x), run))) own();
}

void backward(const View& dx, const View* dgamma, const View* dbeta, const View& dy, const View& x,
              const View& mean, const View& var, const View* gamma, double eps) {
  const auto own = [&] { own_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, eps); };
  if (!takes(x, {&dx, &dy}, {&mean, &var, gamma}, eps) || (dgamma && !takes_vector(dgamma, x)) ||
      (dbeta && !takes_vector(dbeta, x)))
    return own();
  const ParamGrads pg(dgamma, dbeta, var);
  const auto run = [&](Way w) {
    if (w != Way::own) return cudnn_backward(w, dx, pg.dgamma, pg.dbeta, dy, x, mean, var, *gamma, eps);
    own();
    return true;
  };
  if (!run(choose_way("backward", x, !aliases(dx, dy) && !aliases(dx, x), run))) own();
}

// The fused forms (backend.h's batch_norm_relu_*): the own kernels do them in one pass; around
// cuDNN's batch norm, its output then relu(y + residual) in one own pass, and backward
// dz = y > 0 ? dy : 0 in one pass (also dresidual), then cuDNN's backward of dz.
void relu_forward_train(const View& y, const View& mean, const View& var, const View& x, const View* gamma,
                        const View* beta, const View* residual, double eps) {
  const auto own = [&] { own_relu_forward_train(y, mean, var, x, gamma, beta, residual, eps); };
  if (!takes(x, {&y}, {&mean, &var, gamma, beta}, eps) || (residual && residual->dtype != x.dtype)) return own();
  const auto run = [&](Way w) {
    if (w == Way::own) {
      own();
      return true;
    }
    if (!cudnn_forward(w, y, mean, var, x, *gamma, *beta, eps)) return false;
    batch_norm_add_relu(y, residual);
    return true;
  };
  const bool may_repeat = !aliases(y, x) && (!residual || !aliases(y, *residual));
  // The own kernels read along the rows only where the residual is channels-last too.
  const char* op = !residual                                 ? "forward, relu"
                   : tensor_dims(*residual) == tensor_dims(x) ? "forward, relu(+ residual)"
                                                              : "forward, relu(+ residual in another layout)";
  if (!run(choose_way(op, x, may_repeat, run))) own();
}

void relu_backward(const View& dx, const View* dresidual, const View* dgamma, const View* dbeta,
                   const View& dy, const View& y, const View& x, const View& mean, const View& var,
                   const View* gamma, double eps) {
  const auto own = [&] { own_relu_backward(dx, dresidual, dgamma, dbeta, dy, y, x, mean, var, gamma, eps); };
  if (!takes(x, {&dx, &dy, &y}, {&mean, &var, gamma}, eps) || (dresidual && !takes(x, {dresidual}, {}, eps)) ||
      (dgamma && !takes_vector(dgamma, x)) || (dbeta && !takes_vector(dbeta, x)))
    return own();
  std::optional<DeviceBuffer> scratch;
  View dz = x;  // x's dense layout
  if (dresidual) {
    dz = *dresidual;
  } else {
    scratch.emplace(static_cast<size_t>(x.numel()) * dtype_size(x.dtype));
    dz.data = scratch->data();
    dz.derived = nullptr;
  }
  const ParamGrads pg(dgamma, dbeta, var);
  const auto run = [&](Way w) {
    if (w == Way::own) {
      own();
      return true;
    }
    cuda_backend()->binary(BinaryOp::relu_backward, dz, dy, y);
    return cudnn_backward(w, dx, pg.dgamma, pg.dbeta, dz, x, mean, var, *gamma, eps);
  };
  bool may_repeat = !aliases(dx, dy) && !aliases(dx, x) && !aliases(dx, y);
  if (dresidual) may_repeat = may_repeat && !aliases(*dresidual, dy) && !aliases(*dresidual, y);
  if (!run(choose_way("backward, relu", x, may_repeat, run))) own();
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

namespace ringflow {

std::vector<std::string> cudnn_batch_norm_choices() {
  cuda::WayCache& cache = cuda::way_cache();
  std::lock_guard lock(cache.mutex);
  return cache.lines;
}

}  // namespace ringflow

#pragma GCC diagnostic pop
