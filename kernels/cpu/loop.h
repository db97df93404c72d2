// A small TensorIterator for the CPU backend's own loops: lays the operands out in the
// output's memory order, drops size-1 dims, merges dims that are contiguous for every
// operand, and accepts the result only when the innermost dim is unit-stride for the
// output and unit- or zero-stride (broadcast) for each input. That covers same-layout
// operands of any dense layout, a per-channel vector broadcast in NCHW or NHWC, and a
// scalar broadcast; everything else is left to the reference kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>

#include <omp.h>

#include "ringflow/kernels/view.h"

namespace ringflow::cpu {

constexpr int kLoopMaxDims = 8;
constexpr int kLoopMaxOps = 4;  // out + up to 3 inputs

struct LoopPlan {
  int ndim = 0;   // >= 1; dim ndim-1 is the innermost
  int nops = 0;   // operand 0 is the output
  std::array<int64_t, kLoopMaxDims> size{};
  std::array<std::array<int64_t, kLoopMaxDims>, kLoopMaxOps> stride{};
  int64_t outer() const {
    int64_t n = 1;
    for (int d = 0; d < ndim - 1; ++d) n *= size[d];
    return n;
  }
  int64_t inner() const { return size[ndim - 1]; }
  bool inner_unit(int op) const { return stride[op][ndim - 1] == 1; }
  // Offset (elements) of operand op at outer index o.
  int64_t offset(int op, int64_t o) const {
    int64_t off = 0;
    for (int d = ndim - 2; d >= 0; --d) {
      const int64_t i = o % size[d];
      o /= size[d];
      off += i * stride[op][d];
    }
    return off;
  }
};

// Fills `plan` and returns true when the loop fits (see the header comment).
inline bool make_loop_plan(LoopPlan& plan, const View& out, std::initializer_list<const View*> ins) {
  if (out.dim() > kLoopMaxDims || static_cast<int>(ins.size()) + 1 > kLoopMaxOps) return false;
  std::array<const View*, kLoopMaxOps> ops{&out};
  int nops = 1;
  for (const View* v : ins) {
    if (v->shape != out.shape) return false;
    ops[nops++] = v;
  }
  // Non-trivial dims, ordered by the output's stride, outermost first.
  std::array<int, kLoopMaxDims> dims{};
  int nd = 0;
  for (int d = 0; d < out.dim(); ++d) {
    if (out.shape[d] == 0) return false;
    if (out.shape[d] == 1) continue;
    if (out.strides[d] <= 0) return false;  // a broadcast output is not written densely
    dims[nd++] = d;
  }
  std::stable_sort(dims.begin(), dims.begin() + nd,
                   [&](int a, int b) { return out.strides[a] > out.strides[b]; });
  plan = LoopPlan{};
  plan.nops = nops;
  int n = 0;
  for (int k = 0; k < nd; ++k) {
    const int d = dims[k];
    if (n > 0) {
      bool merge = true;
      for (int op = 0; op < nops; ++op) {
        if (plan.stride[op][n - 1] != ops[op]->strides[d] * ops[op]->shape[d]) merge = false;
      }
      if (merge) {
        plan.size[n - 1] *= out.shape[d];
        for (int op = 0; op < nops; ++op) plan.stride[op][n - 1] = ops[op]->strides[d];
        continue;
      }
    }
    plan.size[n] = out.shape[d];
    for (int op = 0; op < nops; ++op) plan.stride[op][n] = ops[op]->strides[d];
    ++n;
  }
  if (n == 0) {  // a single element
    plan.size[0] = 1;
    for (int op = 0; op < nops; ++op) plan.stride[op][0] = 1;
    n = 1;
  }
  plan.ndim = n;
  // The output must not overlap itself: each dim steps over the whole of the next.
  for (int d = 0; d + 1 < n; ++d) {
    if (plan.stride[0][d] < plan.stride[0][d + 1] * plan.size[d + 1]) return false;
  }
  if (plan.stride[0][n - 1] != 1) return false;
  for (int op = 1; op < nops; ++op) {
    const int64_t s = plan.stride[op][n - 1];
    if (s != 0 && s != 1) return false;
  }
  return true;
}

// Runs body(o, begin, end) over the outer index o and the inner range [begin, end),
// in parallel when there is enough work. body computes its own operand offsets.
template <class Body>
void parallel_loop(const LoopPlan& plan, Body&& body) {
  const int64_t outer = plan.outer(), inner = plan.inner();
  const int64_t total = outer * inner;
  constexpr int64_t kGrain = 16384;  // elements per task below which threads cost more
  const int threads = total < 2 * kGrain ? 1 : omp_get_max_threads();
  if (threads == 1) {
    for (int64_t o = 0; o < outer; ++o) body(o, int64_t{0}, inner);
    return;
  }
  // Split the inner dim too when there are few outer rows.
  const int64_t chunks = outer >= 4 * threads ? 1 : std::max<int64_t>(1, std::min<int64_t>(
                                                        (4 * threads + outer - 1) / outer, inner / 1024));
  const int64_t chunk = (inner + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t t = 0; t < outer * chunks; ++t) {
    const int64_t o = t / chunks, c = t % chunks;
    const int64_t b = c * chunk, e = std::min(inner, b + chunk);
    if (b < e) body(o, b, e);
  }
}

}  // namespace ringflow::cpu
