// Convolutions on cuDNN (forward, backward-data, backward-filter, bias) in f32, f64, f16
// and bf16, f32 accumulation for the 16-bit types. Descriptors come from cudnn_conv_plan.h;
// the algorithm of each shape is measured once (cudnnFind*AlgorithmEx, as cudnn.benchmark)
// and cached; workspaces come from the caching allocator. Views cuDNN cannot describe are
// copied dense first, and asymmetric padding goes through explicit zeros (Note [Asymmetric
// padding on cuDNN]). f32 stays off TF32 tensor cores unless allow_tf32().
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the legacy conv API of cuDNN 9

#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/cudnn_conv_plan.h"
#include "ringflow/kernels/cuda/cudnn_descriptors.h"
#include "ringflow/kernels/cuda/cudnn_handle.h"

namespace ringflow::cuda {
namespace {

// Workspace cuDNN may use per call, bytes: enough for the fast algorithms of VGG/ResNet layers.
constexpr size_t kWorkspaceLimit = size_t{1} << 30;

cudnnMathType_t math_type(DType dt, bool tf32) {
  if (dt == DType::f64) return CUDNN_DEFAULT_MATH;
  if (dt == DType::f32) return tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

// Whether a 4-D view is laid out (N, H, W, C) in memory rather than (N, C, H, W).
bool channels_last(const View& v) { return !v.is_contiguous() && v.is_channels_last(); }

// A dense buffer (not filled) of v's shape, (N, C, H, W) in memory or channels last.
View dense_like(const View& v, std::optional<DeviceBuffer>& buffer, bool last = false) {
  View d = v;
  const int64_t C = v.shape[1], H = v.shape[2], W = v.shape[3];
  d.strides = last ? std::vector<int64_t>{H * W * C, 1, W * C, C} : std::vector<int64_t>{C * H * W, H * W, W, 1};
  d.derived = nullptr;
  buffer.emplace(static_cast<size_t>(std::max<int64_t>(v.numel(), 1)) * dtype_size(v.dtype));
  d.data = buffer->data();
  return d;
}

// v itself when cuDNN can describe it, else a dense copy of it in `buffer`.
View describable(const View& v, std::optional<DeviceBuffer>& buffer) {
  if (tensor_dims(v)) return v;
  View d = dense_like(v, buffer, channels_last(v));
  copy(d, v);
  return d;
}

// v itself when cuDNN can describe it and it is in `like`'s layout, else a buffer (not
// filled) in that layout: as for filters (filter_like), cuDNN has few algorithms, if any,
// for a channels-last operand beside an NCHW one, and none with FMA math alone.
View in_layout_of(const View& v, const View& like, std::optional<DeviceBuffer>& buffer) {
  if (tensor_dims(v) && channels_last(v) == channels_last(like)) return v;
  return dense_like(v, buffer, channels_last(like));
}

// in_layout_of, filled from v.
View operand_like(const View& v, const View& like, std::optional<DeviceBuffer>& buffer) {
  const View d = in_layout_of(v, like, buffer);
  if (d.data != v.data) copy(d, v);
  return d;
}

// x with the explicit zero rows and columns of `pad` around it, in `buffer`: zeroed, and
// when `fill_from_x`, x copied into its interior. Returns the padded view; *interior (if
// given) is the part that x covers.
View padded(const View& x, const ConvPadding& pad, bool fill_from_x,
            std::optional<DeviceBuffer>& buffer, View* interior = nullptr) {
  View big = x;
  big.shape[2] += pad.extra_top + pad.extra_bottom;
  big.shape[3] += pad.extra_left + pad.extra_right;
  big = dense_like(big, buffer, channels_last(x));
  fill(big, 0.0);
  View in = big;
  in.shape = x.shape;
  in.data = static_cast<char*>(big.data) +
            (pad.extra_top * big.strides[2] + pad.extra_left * big.strides[3]) * dtype_size(x.dtype);
  if (fill_from_x) copy(in, x);
  if (interior) *interior = in;
  return big;
}

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const View& w) {
    RF_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d));
    const auto layout = filter_layout(w);
    RF_CHECK_CUDNN(cudnnSetFilter4dDescriptor(
        d, data_type(w.dtype), *layout == FilterLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
        static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]), static_cast<int>(w.shape[2]),
        static_cast<int>(w.shape[3])));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const ConvPadding& pad, const Conv2dParams& p, DType dt, bool tf32) {
    RF_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    RF_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(
        d, static_cast<int>(pad.pad_h), static_cast<int>(pad.pad_w), static_cast<int>(p.stride_h),
        static_cast<int>(p.stride_w), static_cast<int>(p.dilation_h), static_cast<int>(p.dilation_w),
        CUDNN_CROSS_CORRELATION, dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    RF_CHECK_CUDNN(cudnnSetConvolutionMathType(d, math_type(dt, tf32)));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The operands of one call, made describable, with their descriptors.
struct Call {
  bool tf32 = allow_tf32();  // read once per call, first: the descriptor and the key agree
  View x, w, y;  // y: the convolution's output (dy for the backward passes)
  TensorDesc xd, yd;
  FilterDesc wd;
  ConvDesc cd;
  ConvKey key;
  Call(const View& x_, const View& w_, const View& y_, const ConvPadding& pad,
       const Conv2dParams& p, ConvDirection direction)
      : x(x_), w(w_), y(y_), xd(x), yd(y), wd(w), cd(pad, p, x.dtype, tf32) {
    RF_CHECK_CUDA(cudaGetDevice(&key.device));
    key.direction = direction;
    key.dtype = x.dtype;
    key.tf32 = tf32;
    key.x = *tensor_dims(x);
    key.y = *tensor_dims(y);
    key.w = {static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]),
             static_cast<int>(w.shape[2]), static_cast<int>(w.shape[3])};
    key.w_layout = *filter_layout(w);
    key.params = {pad.pad_h, pad.pad_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w};
    key.align = {alignment(x.data), alignment(w.data), alignment(y.data)};
  }
};

// cuDNN ran none of its algorithms for a call (with FMA math alone it has none for some
// channels-last shapes): the caller may try again in NCHW.
struct NoAlgorithm : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Chosen {
  int algo;  // -1: none qualified (cached, so that the search is not repeated)
  size_t workspace;
  cudnnMathType_t math;  // the candidate's: set on the descriptor before the call
};

template <class Perf>
ConvCandidate candidate(const Perf& r) {
  ConvCandidate c;
  c.algo = static_cast<int>(r.algo);
  c.ok = r.status == CUDNN_STATUS_SUCCESS;
  c.math = r.mathType == CUDNN_FMA_MATH        ? ConvMath::fma
           : r.mathType == CUDNN_DEFAULT_MATH ? ConvMath::default_math
                                              : ConvMath::tensor_ops;
  c.time_ms = r.time;
  c.workspace = r.memory;
  return c;
}

// The cached algorithm for call.key, measured by `find` (which fills up to 16 Perf results
// and their count, given a workspace) on a miss.
template <class Perf, class Find>
Chosen choose(const Call& call, const char* op, Find&& find) {
  static std::mutex mutex;
  static auto* cache = new std::map<ConvKey, Chosen>;  // never destroyed, as the handles
  {
    std::lock_guard lock(mutex);
    if (const auto it = cache->find(call.key); it != cache->end()) {
      if (it->second.algo < 0) throw NoAlgorithm(std::string("cuda ") + op + ": cuDNN has no algorithm");
      return it->second;
    }
  }
  size_t free_bytes = 0, total = 0;
  RF_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  const size_t limit = std::min(kWorkspaceLimit, free_bytes / 2);
  Perf results[16];
  int count = 0;
  {
    DeviceBuffer workspace(limit);
    find(results, &count, workspace.data(), limit);
  }
  ConvCandidate candidates[16];
  cudnnMathType_t maths[16];
  for (int i = 0; i < count; ++i) {
    candidates[i] = candidate(results[i]);
    candidates[i].index = i;
    maths[i] = results[i].mathType;
  }
  const auto best = choose_algorithm(candidates, count, call.key.dtype, call.key.tf32, limit);
  if (!best) {
    // Remembered only when the search had the whole workspace: with less (memory was short)
    // a later call searches again.
    std::lock_guard lock(mutex);
    if (limit == kWorkspaceLimit) cache->emplace(call.key, Chosen{-1, 0, CUDNN_DEFAULT_MATH});
    throw NoAlgorithm(std::string("cuda ") + op + ": cuDNN has no algorithm for x " +
                             shape_str(call.x.shape) + " w " + shape_str(call.w.shape) + " " +
                             dtype_name(call.x.dtype) + " (candidates: " +
                             describe_candidates(candidates, count) + ")");
  }
  const Chosen chosen{best->algo, best->workspace, maths[best->index]};
  std::lock_guard lock(mutex);
  cache->emplace(call.key, chosen);
  return chosen;
}

// Checks shapes and dtypes as the reference does.
void check_conv(const View& x, const View& w, const View& y, const Conv2dParams& p, const char* op) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(std::string("cuda ") + op + ": " + what);
  };
  if (x.dim() != 4 || w.dim() != 4 || y.dim() != 4)
    fail("x, w, y must be 4-D, got " + shape_str(x.shape) + ", " + shape_str(w.shape) + ", " + shape_str(y.shape));
  if (x.dtype != w.dtype || x.dtype != y.dtype)
    fail(std::string("dtypes differ: ") + dtype_name(x.dtype) + ", " + dtype_name(w.dtype) + ", " + dtype_name(y.dtype));
  (void)data_type(x.dtype);
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 ||
      p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0)
    fail("stride and dilation must be positive and padding non-negative");
  const int64_t eh = (w.shape[2] - 1) * p.dilation_h + 1, ew = (w.shape[3] - 1) * p.dilation_w + 1;
  const int64_t P = (x.shape[2] + p.pad_top + p.pad_bottom - eh) / p.stride_h + 1;
  const int64_t Q = (x.shape[3] + p.pad_left + p.pad_right - ew) / p.stride_w + 1;
  if (w.shape[1] != x.shape[1] || y.shape[0] != x.shape[0] || y.shape[1] != w.shape[0] ||
      y.shape[2] != P || y.shape[3] != Q)
    fail("x " + shape_str(x.shape) + " and w " + shape_str(w.shape) + " give (" +
         std::to_string(x.shape[0]) + ", " + std::to_string(w.shape[0]) + ", " + std::to_string(P) +
         ", " + std::to_string(Q) + "), not y " + shape_str(y.shape));
}

// w itself when it is in x's layout, else a buffer (not filled) of w's shape in that layout:
// cuDNN has few algorithms, if any, for a channels-last filter with an NCHW input or the
// other way round.
View filter_like(const View& w, const View& x, std::optional<DeviceBuffer>& buffer) {
  const FilterLayout want = channels_last(x) ? FilterLayout::nhwc : FilterLayout::nchw;
  if (filter_layout(w) == want) return w;
  return dense_like(w, buffer, want == FilterLayout::nhwc);
}

// w in x's layout (filter_like), filled.
View filter_operand(const View& w, const View& x, std::optional<DeviceBuffer>& buffer) {
  const View d = filter_like(w, x, buffer);
  if (d.data != w.data) copy(d, w);
  return d;
}

void forward_in(const View& y, const View& x, const View& w, const View* bias,
                const Conv2dParams& p) {
  if (y.numel() == 0) return;
  const ConvPadding pad = conv_padding(p);
  std::optional<DeviceBuffer> xb, wb, yb;
  const View xv = pad.explicit_zeros() ? padded(x, pad, /*fill_from_x=*/true, xb) : describable(x, xb);
  const View wv = filter_operand(w, xv, wb);
  const View yv = in_layout_of(y, xv, yb);
  const Call call(xv, wv, yv, pad, p, ConvDirection::forward);
  cudnnHandle_t h = cudnn_handle();
  const Chosen c = choose<cudnnConvolutionFwdAlgoPerf_t>(call, "conv2d_forward",
      [&](cudnnConvolutionFwdAlgoPerf_t* r, int* n, void* ws, size_t size) {
        RF_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
            h, call.xd.d, xv.data, call.wd.d, wv.data, call.cd.d, call.yd.d, yv.data, 16, n, r, ws, size));
      });
  const Scalars s(x.dtype);
  RF_CHECK_CUDNN(cudnnSetConvolutionMathType(call.cd.d, c.math));  // as measured
  DeviceBuffer workspace(c.workspace);
  RF_CHECK_CUDNN(cudnnConvolutionForward(h, s.one(), call.xd.d, xv.data, call.wd.d, wv.data,
                                         call.cd.d, static_cast<cudnnConvolutionFwdAlgo_t>(c.algo),
                                         workspace.data(), c.workspace, s.zero(), call.yd.d, yv.data));
  if (bias) {
    if (bias->dtype != y.dtype || bias->dim() != 1 || bias->shape[0] != y.shape[1])
      throw std::invalid_argument("cuda conv2d_forward: bias " + shape_str(bias->shape) + " " +
                                  dtype_name(bias->dtype) + " for y " + shape_str(y.shape));
    const TensorDesc bd(*bias, 0);
    RF_CHECK_CUDNN(cudnnAddTensor(h, s.one(), bd.d, bias->data, s.one(), call.yd.d, yv.data));
  }
  if (yv.data != y.data) copy(y, yv);
}

void backward_data_in(const View& dx, const View& dy, const View& w, const Conv2dParams& p) {
  if (dx.numel() == 0) return;
  const ConvPadding pad = conv_padding(p);
  std::optional<DeviceBuffer> dxb, dyb, wb;
  View interior;
  const View dxv = pad.explicit_zeros() ? padded(dx, pad, /*fill_from_x=*/false, dxb, &interior)
                                        : (tensor_dims(dx) ? dx : dense_like(dx, dxb, channels_last(dx)));
  const View dyv = operand_like(dy, dxv, dyb);
  const View wv = filter_operand(w, dxv, wb);
  if (dy.numel() == 0) {
    fill(dx, 0.0);
    return;
  }
  const Call call(dxv, wv, dyv, pad, p, ConvDirection::backward_data);
  cudnnHandle_t h = cudnn_handle();
  const Scalars s(dx.dtype);
  const Chosen c = choose<cudnnConvolutionBwdDataAlgoPerf_t>(call, "conv2d_backward_data",
      [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int* n, void* ws, size_t size) {
        RF_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(
            h, call.wd.d, wv.data, call.yd.d, dyv.data, call.cd.d, call.xd.d, dxv.data, 16, n, r, ws, size));
      });
  RF_CHECK_CUDNN(cudnnSetConvolutionMathType(call.cd.d, c.math));
  DeviceBuffer workspace(c.workspace);
  RF_CHECK_CUDNN(cudnnConvolutionBackwardData(
      h, s.one(), call.wd.d, wv.data, call.yd.d, dyv.data, call.cd.d,
      static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), workspace.data(), c.workspace, s.zero(),
      call.xd.d, dxv.data));
  if (pad.explicit_zeros()) copy(dx, interior);
  else if (dxv.data != dx.data) copy(dx, dxv);
}

void backward_weights_in(const View& dw, const View* db, const View& dy, const View& x,
                         const Conv2dParams& p) {
  const ConvPadding pad = conv_padding(p);
  std::optional<DeviceBuffer> xb, dyb, dwb;
  const View xv = pad.explicit_zeros() ? padded(x, pad, /*fill_from_x=*/true, xb) : describable(x, xb);
  const View dyv = operand_like(dy, xv, dyb);
  const View dwv = filter_like(dw, xv, dwb);
  cudnnHandle_t h = cudnn_handle();
  const Scalars s(x.dtype);
  if (dy.numel() == 0) {
    fill(dw, 0.0);
    if (db) fill(*db, 0.0);
    return;
  }
  const Call call(xv, dwv, dyv, pad, p, ConvDirection::backward_filter);
  const Chosen c = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(call, "conv2d_backward_weights",
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int* n, void* ws, size_t size) {
        RF_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            h, call.xd.d, xv.data, call.yd.d, dyv.data, call.cd.d, call.wd.d, dwv.data, 16, n, r, ws, size));
      });
  RF_CHECK_CUDNN(cudnnSetConvolutionMathType(call.cd.d, c.math));
  DeviceBuffer workspace(c.workspace);
  RF_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
      h, s.one(), call.xd.d, xv.data, call.yd.d, dyv.data, call.cd.d,
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), workspace.data(), c.workspace,
      s.zero(), call.wd.d, dwv.data));
  if (dwv.data != dw.data) copy(dw, dwv);
  if (db) {
    if (db->dtype != dy.dtype || db->dim() != 1 || db->shape[0] != dy.shape[1])
      throw std::invalid_argument("cuda conv2d_backward_weights: db " + shape_str(db->shape) +
                                  " " + dtype_name(db->dtype) + " for dy " + shape_str(dy.shape));
    const TensorDesc bd(*db, 0);
    const cudnnStatus_t status =
        cudnnConvolutionBackwardBias(h, s.one(), call.yd.d, dyv.data, s.zero(), bd.d, db->data);
    if (status == CUDNN_STATUS_NOT_SUPPORTED) {
      // cuDNN 9 refuses some shapes (a (1, 1, 1, 1) dy on an H100): the own sum over N, H, W.
      View out = *db;
      const int64_t K = db->shape[0], s1 = db->strides[0];
      out.shape = {1, K, 1, 1};
      out.strides = {K * s1, s1, s1, s1};
      cuda_backend()->reduce(ReduceOp::sum, out, dyv);
    } else {
      RF_CHECK_CUDNN(status);
    }
  }
}

// Runs `conv(anchor)`, the other operands following the anchor's layout; when cuDNN has no
// algorithm for a channels-last anchor, again on an NCHW copy of it (an output: copied back).
template <class Conv>
void with_nchw_fallback(const View& anchor, bool is_output, Conv&& conv) {
  try {
    conv(anchor);
    return;
  } catch (const NoAlgorithm&) {
    if (!channels_last(anchor)) throw;
  }
  std::optional<DeviceBuffer> buffer;
  const View nchw = dense_like(anchor, buffer);
  if (!is_output) copy(nchw, anchor);
  conv(nchw);
  if (is_output) copy(anchor, nchw);
}

void conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                    const Conv2dParams& p) {
  check_conv(x, w, y, p, "conv2d_forward");
  with_nchw_fallback(x, false, [&](const View& xa) { forward_in(y, xa, w, bias, p); });
}

void conv2d_backward_data(const View& dx, const View& dy, const View& w, const Conv2dParams& p) {
  check_conv(dx, w, dy, p, "conv2d_backward_data");
  with_nchw_fallback(dx, true, [&](const View& dxa) { backward_data_in(dxa, dy, w, p); });
}

void conv2d_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                             const Conv2dParams& p) {
  check_conv(x, dw, dy, p, "conv2d_backward_weights");
  with_nchw_fallback(x, false, [&](const View& xa) { backward_weights_in(dw, db, dy, xa, p); });
}

}  // namespace

void set_conv_kernels(Backend& b) {
  b.conv2d_forward = conv2d_forward;
  b.conv2d_backward_data = conv2d_backward_data;
  b.conv2d_backward_weights = conv2d_backward_weights;
}

}  // namespace ringflow::cuda

#pragma GCC diagnostic pop
