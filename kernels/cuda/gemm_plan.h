// How a batched matmul over strided Views maps onto one column-major strided-batched GEMM
// (cuBLAS's gemmStridedBatched), in plain C++ so that a host test can check the mapping
// without a GPU (tests/gemm_plan_test.cpp). Used by kernels/cuda/matmul.cpp.
//
// Note [Row-major matmul on column-major cuBLAS]: out (M, N) = a (M, K) @ b (K, N) is,
// read column-major, out^T (N, M) = b^T (N, K) @ a^T (K, M). A row-major matrix X (rows
// of stride ld, elements of stride 1) is X^T column-major with leading dimension ld, used as
// it is (no transpose); a column-major one (elements of stride 1 down a column, columns of
// stride ld) is X itself, used transposed. So cuBLAS's A is our b, its B our a, its C our
// out; out must be row-major. Strides of size-1 dims carry no information and are ignored.
// Anything else (a gap between elements, stride 0 inside a matrix, negative strides) has no
// GEMM description: that operand is copied contiguous first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "ringflow/kernels/view.h"

namespace ringflow::cuda {

// One operand as cuBLAS takes it: the column-major matrix X^T (transpose false) or X
// (transpose true), its leading dimension, and the distance between batch entries (0
// broadcasts one matrix over the batch).
struct GemmOperand {
  bool transpose = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;
  bool operator==(const GemmOperand&) const = default;
};

// x (B, R, C) as an operand for X^T (C, R) column-major; nullopt when its strides have none.
inline std::optional<GemmOperand> gemm_operand(const View& x) {
  const int64_t R = x.shape[1], C = x.shape[2];
  const int64_t sr = x.strides[1], sc = x.strides[2];
  const int64_t sb = x.shape[0] == 1 ? 0 : x.strides[0];
  if (sb < 0) return std::nullopt;
  // Row-major: elements of a row adjacent, rows ld >= C apart.
  if ((C == 1 || sc == 1) && (R == 1 || sr >= std::max<int64_t>(C, 1)))
    return GemmOperand{false, R == 1 ? std::max<int64_t>(C, 1) : sr, sb};
  // Column-major: elements of a column adjacent, columns ld >= R apart.
  if ((R == 1 || sr == 1) && (C == 1 || sc >= std::max<int64_t>(R, 1)))
    return GemmOperand{true, C == 1 ? std::max<int64_t>(R, 1) : sc, sb};
  return std::nullopt;
}

// C (m, n) = op(A) (m, k) @ op(B) (k, n), column-major, `batch` times.
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0, batch = 0;
  GemmOperand a;  // cuBLAS's A: our b
  GemmOperand b;  // cuBLAS's B: our a
  GemmOperand c;  // our out (never transposed)
};

// The GEMM for out (B, M, N) = a (B, M, K) @ b (B, K, N), or nullopt when out is not
// row-major (compute into a contiguous temporary, then copy) or a or b has no GEMM
// description (copy it contiguous, then plan again).
inline std::optional<GemmPlan> plan_gemm(const View& out, const View& a, const View& b) {
  const auto c_op = gemm_operand(out), a_op = gemm_operand(b), b_op = gemm_operand(a);
  if (!c_op || c_op->transpose || !a_op || !b_op) return std::nullopt;
  if (out.shape[0] > 1 && c_op->batch_stride == 0) return std::nullopt;  // batches would collide
  GemmPlan p;
  p.m = out.shape[2];
  p.n = out.shape[1];
  p.k = a.shape[2];
  p.batch = out.shape[0];
  p.a = *a_op;
  p.b = *b_op;
  p.c = *c_op;
  return p;
}

}  // namespace ringflow::cuda
