// How a convolution over strided Views maps onto cuDNN's descriptors, in plain C++ so that a
// host test checks it without a GPU (tests/cudnn_conv_plan_test.cpp). Used by cudnn_conv.cpp.
//
// Note [Asymmetric padding on cuDNN]: the legacy API pads symmetrically; the graph API takes
// padding before and after each axis, but one of its backward-filter engines returned a wrong
// dw for such a convolution on an H100 (f32, pre (0, 2), post (1, 0): tests/cuda_conv_test.cpp,
// chosen in one run of three). So with pad_top != pad_bottom (or left != right) cuDNN gets the
// smaller of the two on each axis, for both APIs, and x is first copied into a zeroed buffer
// that carries the rest (`extra_*`) as explicit zero rows/columns; backward-data writes into
// such a buffer and its interior is copied into dx.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/view.h"

namespace ringflow::cuda {

struct ConvPadding {
  int64_t pad_h = 0, pad_w = 0;  // what cuDNN pads on both sides
  int64_t extra_top = 0, extra_bottom = 0, extra_left = 0, extra_right = 0;  // explicit zeros
  bool explicit_zeros() const {
    return extra_top || extra_bottom || extra_left || extra_right;
  }
};

inline ConvPadding conv_padding(const Conv2dParams& p) {
  ConvPadding c;
  c.pad_h = std::min(p.pad_top, p.pad_bottom);
  c.pad_w = std::min(p.pad_left, p.pad_right);
  c.extra_top = p.pad_top - c.pad_h;
  c.extra_bottom = p.pad_bottom - c.pad_h;
  c.extra_left = p.pad_left - c.pad_w;
  c.extra_right = p.pad_right - c.pad_w;
  return c;
}

// A 4-D tensor as cuDNN's strided descriptor takes it: sizes and strides (elements), all
// strides positive. nullopt when the view has none (a stride 0 of a dim larger than 1, or
// overlapping elements): copy it contiguous first.
struct TensorDims {
  std::array<int, 4> sizes{}, strides{};
  bool operator==(const TensorDims&) const = default;
};

// v's shape with the dense strides of (N, C, H, W) in memory or channels last; no data.
inline View dense_layout(const View& v, bool last) {
  View d = v;
  d.strides = last ? channels_last_strides(v.shape) : contiguous_strides(v.shape);
  d.layout = MemoryLayout::strided;
  d.derived = nullptr;
  d.data = nullptr;
  return d;
}

// A view both contiguous and channels-last (size-1 dims: C = 1, or H = W = 1) is described in
// the layout `prefer_nhwc` names: the same memory either way, and cuDNN has more algorithms
// where every operand of a call is described in one layout.
inline std::optional<TensorDims> tensor_dims(const View& v, bool prefer_nhwc = false) {
  if (v.dim() != 4) return std::nullopt;
  TensorDims d;
  // A dense layout implies no overlap; anything else is not taken.
  if (!v.is_contiguous() && !v.is_channels_last()) return std::nullopt;
  const bool nhwc = v.is_contiguous() && v.is_channels_last() ? prefer_nhwc : !v.is_contiguous();
  // Strides of size-1 dims carry no information; give them the dense layout's values. Not
  // channels_last_strides: cuDNN's descriptor wants each stride >= 1 after the product.
  const int64_t C = v.shape[1], H = v.shape[2], W = v.shape[3];
  const std::array<int64_t, 4> dense =
      nhwc ? std::array<int64_t, 4>{H * W * C, 1, W * C, C}
           : std::array<int64_t, 4>{C * H * W, H * W, W, 1};
  for (int i = 0; i < 4; ++i) {
    if (v.shape[i] > INT32_MAX || dense[i] > INT32_MAX) return std::nullopt;
    d.sizes[i] = static_cast<int>(v.shape[i]);
    d.strides[i] = static_cast<int>(std::max<int64_t>(dense[i], 1));
  }
  return d;
}

// Filters: cuDNN takes dense KCRS (NCHW) or KRSC (NHWC) only; one that is both (1x1, or
// C = 1) is described as prefer_nhwc says.
enum class FilterLayout { nchw, nhwc };
inline std::optional<FilterLayout> filter_layout(const View& w, bool prefer_nhwc = false) {
  if (w.dim() != 4) return std::nullopt;
  const bool contiguous = w.is_contiguous(), last = w.is_channels_last();
  if (contiguous && last) return prefer_nhwc ? FilterLayout::nhwc : FilterLayout::nchw;
  if (contiguous) return FilterLayout::nchw;
  if (last) return FilterLayout::nhwc;
  return std::nullopt;
}

enum class ConvDirection : uint8_t { forward, backward_data, backward_filter };

// The largest power of two up to 256 that divides the address: cuDNN's fast 16-bit kernels
// need aligned operands, so an algorithm chosen on aligned buffers may not run on an offset
// view, and the choice depends on it.
inline int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int k = 1;
  while (k < 256 && a % (2 * k) == 0) k *= 2;
  return k;
}

// What an algorithm is chosen for, once (cudnn.benchmark): every input of the choice.
struct ConvKey {
  int device = 0;
  ConvDirection direction = ConvDirection::forward;
  DType dtype = DType::f32;
  bool tf32 = false;
  TensorDims x, y;
  std::array<int, 4> w{};
  FilterLayout w_layout = FilterLayout::nchw;
  // pad top, bottom, left, right, stride h/w, dilation h/w
  std::array<int64_t, 8> params{};
  std::array<int, 3> align{};  // alignment() of x, w, y
  auto tie() const {
    return std::tie(device, direction, dtype, tf32, x.sizes, x.strides, y.sizes,
                    y.strides, w, w_layout, params, align);
  }
  bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

// cuDNN's math types: FMA only; default (which may use TF32 for f32 on Ampere and later);
// tensor cores (TF32 for f32).
enum class ConvMath { fma, default_math, tensor_ops };

// Where a candidate comes from: the legacy API's algorithms (cudnnFind*AlgorithmEx), the
// graph API's engine configurations (heuristics, then timed here), or a 1x1 convolution as
// cuBLAS's GEMM (Note [1x1 convolutions as GEMMs] in conv1x1_gemm.h, timed here).
enum class ConvSource : uint8_t { legacy, graph, gemm };

// One of cuDNN's measured candidates, reduced to what the choice needs.
struct ConvCandidate {
  int algo = 0;
  bool ok = false;  // status CUDNN_STATUS_SUCCESS
  ConvMath math = ConvMath::fma;
  float time_ms = 0;
  size_t workspace = 0;  // bytes
  int index = 0;         // position in its source's list
  ConvSource source = ConvSource::legacy;
  int64_t engine = -1;   // graph: the engine's global index (for messages)
  // graph: its place in the heuristics' list it came from (0: first), counting those not tried
  // too, and whether that list was the fallback one (else the instant mode's).
  int rank = 0;
  bool fallback = false;
};

// Note [Which cuDNN kernels a convolution may take]: f32 without TF32 takes only kernels
// without tensor cores, f64 never takes tensor cores, f16 and bf16 take any, which is where
// their speed lies. The legacy API states a kernel's math type; the graph API states notes
// instead, and an engine that notes TENSOR_CORE or DOWN_CONVERT_INPUTS is tensor-core math
// (TF32 for f32 data). A filter "no tensor-core notes unless TF32 is allowed" applied to
// every dtype would put 16-bit convolutions on FMA kernels at a fraction of the tensor
// cores' rate, so the dtype decides first (as choose_algorithm does). Engines that reduce in
// 16 bits (REDUCED_PRECISION_REDUCTION) are refused for every dtype (the accumulation
// stays f32, as the legacy descriptors ask), and those compiled at run time
// (RUNTIME_COMPILATION: seconds of NVRTC per shape, on the first step) are not tried.
struct EngineNotes {
  bool tensor_core = false, down_convert_inputs = false, reduced_precision_reduction = false;
  bool runtime_compilation = false;
};
inline ConvMath engine_math(const EngineNotes& n) {
  return n.tensor_core || n.down_convert_inputs ? ConvMath::tensor_ops : ConvMath::fma;
}
inline bool engine_tried(const EngineNotes& n) {
  return !n.reduced_precision_reduction && !n.runtime_compilation;
}

// The fastest candidate that ran and fits the workspace limit; for f32 without TF32 only FMA
// math qualifies (default math may use TF32), f64 never takes tensor cores, 16-bit dtypes
// take any (Note [Which cuDNN kernels a convolution may take]). Candidates of both sources
// compete on their measured times; the lists need not be sorted. nullopt when none qualifies.
inline bool qualifies(ConvMath math, DType dtype, bool allow_tf32) {
  if (dtype == DType::f32 && !allow_tf32) return math == ConvMath::fma;
  if (dtype == DType::f64) return math != ConvMath::tensor_ops;
  return true;
}
inline std::optional<ConvCandidate> choose_algorithm(const ConvCandidate* candidates, int count,
                                                     DType dtype, bool allow_tf32,
                                                     size_t workspace_limit) {
  std::optional<ConvCandidate> best;
  for (int i = 0; i < count; ++i) {
    const ConvCandidate& c = candidates[i];
    if (!c.ok || c.workspace > workspace_limit || !qualifies(c.math, dtype, allow_tf32)) continue;
    if (!best || c.time_ms < best->time_ms) best = c;
  }
  return best;
}

// Which of a heuristics list's configurations a search times: the first `count` that could
// qualify (engine_tried, and the math the dtype takes), in the list's order. Taking the list's
// first `count` whatever they were left f32 without TF32 few to time, since on Hopper most of
// the engines cuDNN ranks first are tensor-core ones (ResNet-50's f32 searches timed 3-5 graph
// engines, most from the fallback list; PyTorch benchmarks its first 10 valid ones,
// cudnn.benchmark_limit).
inline std::vector<size_t> configs_to_time(const std::vector<EngineNotes>& notes, DType dtype, bool allow_tf32,
                                           int count) {
  std::vector<size_t> picked;
  for (size_t i = 0; i < notes.size() && static_cast<int>(picked.size()) < count; ++i)
    if (engine_tried(notes[i]) && qualifies(engine_math(notes[i]), dtype, allow_tf32)) picked.push_back(i);
  return picked;
}

// Note [Searching the legacy API]: cudnnFind*AlgorithmEx runs every legacy algorithm, the
// slow ones too, and on an H100 the graph API's best won every 16-bit choice of VGG-11,
// ResNet-18 and ResNet-50 by a wide margin (docs/cuda.md), so a 16-bit convolution (f16
// taken with bf16: the same tensor-core engines, unmeasured) searches the legacy API only when
// none of the graph API's candidates qualifies. f32 (FMA or TF32) and f64 search both.
inline bool search_legacy(DType dtype, bool allow_tf32, const ConvCandidate* graph_found, int count,
                          size_t workspace_limit) {
  if (dtype != DType::f16 && dtype != DType::bf16) return true;
  return !choose_algorithm(graph_found, count, dtype, allow_tf32, workspace_limit);
}

// The graph API's view of one convolution: its three tensors (dims and strides in
// elements, a unique id, the byte alignment its pointer guarantees), and the convolution's
// paddings (it takes asymmetric ones; cudnn_conv.cpp gives it symmetric ones only: Note
// [Asymmetric padding on cuDNN]), strides and dilations. For backward
// data, x is dx and y is dy; for backward filter, w is dw and y is dy.
struct GraphTensorSpec {
  std::array<int64_t, 4> dims{}, strides{};
  int64_t uid = 0;
  int64_t alignment = 0;  // bytes
};
struct ConvGraphSpec {
  ConvDirection direction = ConvDirection::forward;
  DType dtype = DType::f32;
  GraphTensorSpec x, w, y;
  std::array<int64_t, 2> pre_padding{}, post_padding{}, stride{}, dilation{};
};

// The unique ids of the operands in the graph and in each call's variant pack.
constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

// An operand's BYTE_ALIGNMENT for the graph API: its address's alignment() capped at 16,
// the widest vector load cuDNN's kernels ask for.
inline int64_t graph_alignment(int align) { return std::min(align, 16); }

// nullopt when a view has no descriptor (tensor_dims) or a size exceeds cuDNN's int range.
// nhwc: the layout of the call, for views that are both (tensor_dims).
inline std::optional<ConvGraphSpec> conv_graph_spec(ConvDirection direction, const View& x,
                                                    const View& w, const View& y,
                                                    const Conv2dParams& p, bool nhwc = false) {
  const auto xd = tensor_dims(x, nhwc), wd = tensor_dims(w, nhwc), yd = tensor_dims(y, nhwc);
  if (!xd || !wd || !yd) return std::nullopt;
  const auto tensor = [](const TensorDims& d, int64_t uid, const void* ptr) {
    GraphTensorSpec t;
    for (int i = 0; i < 4; ++i) {
      t.dims[i] = d.sizes[i];
      t.strides[i] = d.strides[i];
    }
    t.uid = uid;
    t.alignment = graph_alignment(alignment(ptr));
    return t;
  };
  ConvGraphSpec s;
  s.direction = direction;
  s.dtype = x.dtype;
  s.x = tensor(*xd, kUidX, x.data);
  s.w = tensor(*wd, kUidW, w.data);
  s.y = tensor(*yd, kUidY, y.data);
  s.pre_padding = {p.pad_top, p.pad_left};
  s.post_padding = {p.pad_bottom, p.pad_right};
  s.stride = {p.stride_h, p.stride_w};
  s.dilation = {p.dilation_h, p.dilation_w};
  return s;
}

// One candidate in words: "graph engine 12 tensor-ops 1048576 B 0.412 ms", "algo 1 fma failed".
inline std::string describe_candidate(const ConvCandidate& c) {
  const char* math = c.math == ConvMath::fma ? "fma" : c.math == ConvMath::default_math ? "default" : "tensor-ops";
  // A graph engine's place in its heuristics' list ("#1": the instant heuristics' first choice).
  std::string out = c.source == ConvSource::graph  ? "graph engine " + std::to_string(c.engine) +
                                                        (c.fallback ? " fallback #" : " #") + std::to_string(c.rank + 1)
                    : c.source == ConvSource::gemm ? std::string("cublas gemm")
                                                   : "algo " + std::to_string(c.algo);
  out += std::string(" ") + math + " ";
  if (!c.ok) return out + "failed";
  char time[32];
  std::snprintf(time, sizeof time, " %.3f ms", c.time_ms);
  return out + std::to_string(c.workspace) + " B" + time;
}

// cuDNN's candidates in one line, for an error that says why none qualified.
inline std::string describe_candidates(const ConvCandidate* candidates, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const ConvCandidate& c = candidates[i];
    out += (i ? "; " : "") + describe_candidate(c);
  }
  return count ? out : std::string("none listed");
}

}  // namespace ringflow::cuda
