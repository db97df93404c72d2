// sum / mean over f32 tensors that are dense in any layout, as own OpenMP loops with
// double accumulators. In memory order the reduced dims must form one block: the
// patterns (K1, R, K2) with K1 or K2 possibly empty cover full reductions, row sums
// (softmax-like, the last dim) and column sums (bias gradients over N[, H, W] of NCHW
// or NHWC data). Other ops and patterns go to the reference kernel.
#include <vector>

#include <omp.h>

#include "ringflow/kernels/cpu/cpu_kernels.h"

namespace ringflow::cpu {
namespace {

struct Group {
  bool reduced;
  int64_t size;
  int64_t out_stride;  // of the innermost dim of the group (kept groups only)
  int64_t in_stride;
};

}  // namespace

void reduce(ReduceOp op, const View& out, const View& in) {
  const bool fast_op = op == ReduceOp::sum || op == ReduceOp::mean;
  if (!fast_op || in.dtype != DType::f32 || out.dtype != DType::f32 || in.numel() == 0 ||
      out.dim() != in.dim() || !is_dense(in)) {
    return reference_backend().reduce(op, out, in);
  }
  // Non-trivial dims of in, outermost (largest stride) first.
  std::vector<int> dims;
  for (int d = 0; d < in.dim(); ++d) {
    if (in.shape[d] > 1) dims.push_back(d);
    if (out.shape[d] != in.shape[d] && out.shape[d] != 1) return reference_backend().reduce(op, out, in);
  }
  std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) { return in.strides[a] > in.strides[b]; });
  std::vector<Group> groups;
  for (int d : dims) {
    const bool r = out.shape[d] == 1;
    if (!groups.empty() && groups.back().reduced == r &&
        (r || groups.back().out_stride == out.strides[d] * in.shape[d])) {
      groups.back().size *= in.shape[d];
      groups.back().out_stride = r ? 0 : out.strides[d];
      groups.back().in_stride = in.strides[d];
      continue;
    }
    groups.push_back({r, in.shape[d], r ? 0 : out.strides[d], in.strides[d]});
  }
  // Match (K1, R, K2) with K1 and K2 optional.
  Group g1{false, 1, 0, 0}, gr{true, 1, 0, 0}, g2{false, 1, 1, 1};
  size_t i = 0;
  if (i < groups.size() && !groups[i].reduced) g1 = groups[i++];
  if (i < groups.size() && groups[i].reduced) gr = groups[i++];
  if (i < groups.size() && !groups[i].reduced) g2 = groups[i++];
  if (i != groups.size() || (gr.size == 1 && in.numel() > 1)) {
    return reference_backend().reduce(op, out, in);
  }
  const int64_t K1 = g1.size, R = gr.size, K2 = g2.size;
  const int64_t os1 = g1.out_stride, os2 = g2.out_stride;
  // in is dense in this order: element (k1, r, k2) sits at (k1 * R + r) * K2 + k2.
  const float* x = in.ptr<float>();
  float* y = out.ptr<float>();
  const double scale = op == ReduceOp::mean ? 1.0 / static_cast<double>(R) : 1.0;
  const int threads = in.numel() < 32768 ? 1 : omp_get_max_threads();

  if (K2 == 1) {  // row sums (or a full reduction when K1 == 1)
    if (K1 >= threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int64_t k1 = 0; k1 < K1; ++k1) {
        const float* row = x + k1 * R;
        double acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t r = 0; r < R; ++r) acc += row[r];
        y[k1 * os1] = static_cast<float>(acc * scale);
      }
      return;
    }
    for (int64_t k1 = 0; k1 < K1; ++k1) {
      const float* row = x + k1 * R;
      double acc = 0;
#pragma omp parallel for simd reduction(+ : acc) num_threads(threads)
      for (int64_t r = 0; r < R; ++r) acc += row[r];
      y[k1 * os1] = static_cast<float>(acc * scale);
    }
    return;
  }
  // Column sums: each thread accumulates a slice of R into its own K2 doubles.
  std::vector<double> partial(static_cast<size_t>(threads) * K2);
  for (int64_t k1 = 0; k1 < K1; ++k1) {
    const float* block = x + k1 * R * K2;
    std::fill(partial.begin(), partial.end(), 0.0);
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      double* acc = partial.data() + t * K2;
      const int64_t lo = R * t / nt, hi = R * (t + 1) / nt;
      for (int64_t r = lo; r < hi; ++r) {
        const float* row = block + r * K2;
#pragma omp simd
        for (int64_t k = 0; k < K2; ++k) acc[k] += row[k];
      }
    }
    for (int64_t k = 0; k < K2; ++k) {
      double s = 0;
      for (int t = 0; t < threads; ++t) s += partial[t * K2 + k];
      y[k1 * os1 + k * os2] = static_cast<float>(s * scale);
    }
  }
}

}  // namespace ringflow::cpu
