// All a kernel sees of a tensor: a pointer, a dtype, sizes and strides (in elements).
// Kernels know nothing of autograd or ownership; the caller keeps the memory alive.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/dtype.h"
#include "ringflow/kernels/memory_layout.h"

namespace ringflow {

using Shape = std::vector<int64_t>;

// The number of elements of `shape`; throws std::overflow_error naming the shape where the
// product does not fit in int64 (a corrupt file's header, not a tensor).
int64_t shape_numel(const Shape& shape);
// Row-major strides of a contiguous tensor of `shape` (a dimension of size 0 counts as 1).
Shape contiguous_strides(const Shape& shape);
// Strides of a dense 4-D (N, C, H, W) shape laid out NHWC (sizes 0 count as 1); throws
// std::invalid_argument for another rank.
Shape channels_last_strides(const Shape& shape);

// Whether sizes and strides lay the elements out row-major and densely; NCHW sizes laid out
// as NHWC densely. (View's is_contiguous and is_channels_last, for callers that hold the
// two apart, such as a Tensor, and need not copy them into a View.)
inline bool contiguous_layout(const Shape& shape, const Shape& strides) {
  int64_t expected = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}
inline bool channels_last_layout(const Shape& shape, const Shape& strides) {
  if (shape.size() != 4) return false;
  const int64_t C = shape[1], H = shape[2], W = shape[3];
  return (C == 1 || strides[1] == 1) && (W == 1 || strides[3] == C) &&
         (H == 1 || strides[2] == W * C) && (shape[0] == 1 || strides[0] == H * W * C);
}

class DerivedCache;  // kernels/derived_cache.h

struct View {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Shape strides;  // elements, may be 0 (broadcast) but never negative
  // Blocked (kernels/memory_layout.h): a dense 4-D tensor whose C is a multiple of the block, with
  // the strides of a contiguous one; these index memory in order, so elementwise kernels whose
  // operands all share the layout take it as it is, and nothing else reads its elements
  // (Note [blocked operands] in backend.h).
  MemoryLayout layout = MemoryLayout::strided;
  // Where a kernel may keep data derived from the underlying memory (e.g. weights reordered
  // for oneDNN), valid while `version` (the memory's write count) stays the same; null for
  // scratch memory, where nothing may be cached.
  DerivedCache* derived = nullptr;
  uint64_t version = 0;

  int dim() const { return static_cast<int>(shape.size()); }
  int64_t numel() const { return shape_numel(shape); }
  bool is_contiguous() const { return layout == MemoryLayout::strided && contiguous_layout(shape, strides); }
  // The elements fill numel() consecutive slots from data, in some order of the dims.
  bool is_dense() const;
  // NCHW sizes laid out as NHWC in memory (densely).
  bool is_channels_last() const { return layout == MemoryLayout::strided && channels_last_layout(shape, strides); }
  template <class T> T* ptr() const { return static_cast<T*>(data); }
};

std::string shape_str(const Shape& shape);  // "(2, 3, 4)"

// Opaque state a forward kernel hands to its backward (e.g. oneDNN's pooling workspace).
using Workspace = std::shared_ptr<void>;

}  // namespace ringflow
