// Strided indexing for kernels over N operands of one shape: a linear index in, one element
// offset per operand out. Built on the host: dims of size 1 are dropped, the rest ordered by
// operand 0's strides (largest first, so a permuted but dense operand 0 is walked in memory
// order) and adjacent dims merged wherever every operand allows; a contiguous copy is 1-D.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/simt/fast_div.h"
#include "ringflow/kernels/simt/simt.h"
#include "ringflow/kernels/view.h"

namespace ringflow::simt {

constexpr int kMaxDims = 8;

template <int N>
struct Indexer {
  int ndim = 0;
  int64_t numel = 1;
  // Each dim's size as the divisor that splits the linear index: a multiply-high where what
  // it divides fits 31 bits, not a division, which a GPU runs as a sequence of dozens of
  // instructions (a permuting copy, NCHW to channels-last, made one per inner dim per element).
  FastDiv sizes[kMaxDims];
  int64_t strides[N][kMaxDims] = {};  // elements

  RF_HD void offsets(int64_t linear, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 1; --d) {
      int64_t quotient, i;
      sizes[d].divmod(linear, quotient, i);
      linear = quotient;
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
    // What is left indexes the outermost dim: no division (nor any for dense operands, which
    // merge to one dim).
    if (ndim > 0)
      for (int k = 0; k < N; ++k) off[k] += linear * strides[k][0];
  }
};

// views[k]->shape must all equal views[0]->shape (checked by the caller). With
// keep_order the dims stay in row-major order (merged where possible), so that the linear
// index counts positions in that order (argmax needs it).
template <int N>
Indexer<N> make_indexer(const std::array<const View*, N>& views, const char* op,
                        bool keep_order = false) {
  const Shape& shape = views[0]->shape;
  std::vector<int> dims;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (shape[d] != 1) dims.push_back(d);
  if (!keep_order)
    std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) {
      return views[0]->strides[a] > views[0]->strides[b];
    });

  // Merge dims[j] into the previous kept dim when, for every operand,
  // stride(prev) == stride(dims[j]) * size(dims[j]).
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> strides;
  for (int d : dims) {
    bool merge = !sizes.empty();
    for (int k = 0; k < N && merge; ++k)
      merge = strides[k].back() == views[k]->strides[d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (int k = 0; k < N; ++k) strides[k].back() = views[k]->strides[d];
    } else {
      sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) strides[k].push_back(views[k]->strides[d]);
    }
  }
  if (sizes.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument(std::string("cuda ") + op + ": " + std::to_string(sizes.size()) +
                                " dims that cannot be merged (at most " +
                                std::to_string(kMaxDims) + "), shape " + shape_str(shape));
  Indexer<N> ix;
  ix.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < ix.ndim; ++d) {
    ix.numel *= sizes[d];
    for (int k = 0; k < N; ++k) ix.strides[k][d] = strides[k][d];
  }
  // offsets() divides by dim d what is below the product of dims 0..d.
  int64_t below = 1;
  for (int d = 0; d < ix.ndim; ++d) {
    below *= sizes[d];
    ix.sizes[d] = FastDiv(sizes[d], below - 1);
  }
  return ix;
}

}  // namespace ringflow::simt
