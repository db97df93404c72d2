// How a convolution over strided Views maps onto cuDNN's descriptors, in plain C++ so that a
// host test checks it without a GPU (tests/cudnn_conv_plan_test.cpp). Used by cudnn_conv.cpp.
//
// Note [Asymmetric padding on cuDNN]: cuDNN pads symmetrically. For pad_top != pad_bottom
// (or left != right) cuDNN gets the smaller of the two on each axis, and x is first copied
// into a zeroed buffer that carries the rest (`extra_*`) as explicit zero rows/columns;
// backward-data writes into such a buffer and its interior is copied into dx.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

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

inline std::optional<TensorDims> tensor_dims(const View& v) {
  if (v.dim() != 4) return std::nullopt;
  TensorDims d;
  // A dense layout implies no overlap; anything else is not taken.
  if (!v.is_contiguous() && !v.is_channels_last()) return std::nullopt;
  const bool nhwc = !v.is_contiguous();
  // Strides of size-1 dims carry no information; give them the dense layout's values.
  const int64_t N = v.shape[0], C = v.shape[1], H = v.shape[2], W = v.shape[3];
  const std::array<int64_t, 4> dense =
      nhwc ? std::array<int64_t, 4>{H * W * C, 1, W * C, C}
           : std::array<int64_t, 4>{C * H * W, H * W, W, 1};
  for (int i = 0; i < 4; ++i) {
    if (v.shape[i] > INT32_MAX || dense[i] > INT32_MAX) return std::nullopt;
    d.sizes[i] = static_cast<int>(v.shape[i]);
    d.strides[i] = static_cast<int>(std::max<int64_t>(dense[i], 1));
  }
  (void)N;
  return d;
}

// Filters: cuDNN takes dense KCRS (NCHW) or KRSC (NHWC) only.
enum class FilterLayout { nchw, nhwc };
inline std::optional<FilterLayout> filter_layout(const View& w) {
  if (w.dim() != 4) return std::nullopt;
  if (w.is_contiguous()) return FilterLayout::nchw;
  if (w.is_channels_last()) return FilterLayout::nhwc;
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
  std::array<int64_t, 6> params{};  // pad_h, pad_w, stride h/w, dilation h/w
  std::array<int, 3> align{};       // alignment() of x, w, y
  auto tie() const {
    return std::tie(device, direction, dtype, tf32, x.sizes, x.strides, y.sizes, y.strides, w,
                    w_layout, params, align);
  }
  bool operator<(const ConvKey& o) const { return tie() < o.tie(); }
};

// cuDNN's math types: FMA only; default (which may use TF32 for f32 on Ampere and later);
// tensor cores (TF32 for f32).
enum class ConvMath { fma, default_math, tensor_ops };

// One of cuDNN's measured candidates, reduced to what the choice needs.
struct ConvCandidate {
  int algo = 0;
  bool ok = false;  // status CUDNN_STATUS_SUCCESS
  ConvMath math = ConvMath::fma;
  float time_ms = 0;
  size_t workspace = 0;  // bytes
  int index = 0;         // position in cuDNN's list
};

// The fastest candidate that ran and fits the workspace limit; for f32 without TF32 only FMA
// math qualifies (default math may use TF32), f64 never takes tensor cores, 16-bit dtypes
// take any. cuDNN lists candidates fastest first, but the choice does not rely on it.
// nullopt when none qualifies.
inline std::optional<ConvCandidate> choose_algorithm(const ConvCandidate* candidates, int count,
                                                     DType dtype, bool allow_tf32,
                                                     size_t workspace_limit) {
  std::optional<ConvCandidate> best;
  for (int i = 0; i < count; ++i) {
    const ConvCandidate& c = candidates[i];
    if (!c.ok || c.workspace > workspace_limit) continue;
    if (dtype == DType::f32 && !allow_tf32 && c.math != ConvMath::fma) continue;
    if (dtype == DType::f64 && c.math == ConvMath::tensor_ops) continue;
    if (!best || c.time_ms < best->time_ms) best = c;
  }
  return best;
}

// cuDNN's candidates in one line, for an error that says why none qualified.
inline std::string describe_candidates(const ConvCandidate* candidates, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const ConvCandidate& c = candidates[i];
    const char* math = c.math == ConvMath::fma ? "fma" : c.math == ConvMath::default_math ? "default" : "tensor-ops";
    out += (i ? "; algo " : "algo ") + std::to_string(c.algo) + " " + math + " " +
           (c.ok ? std::to_string(c.workspace) + " B" : std::string("failed"));
  }
  return count ? out : std::string("none listed");
}

}  // namespace ringflow::cuda
