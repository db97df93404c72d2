// Batched matmul out (B, M, N) = a (B, M, K) @ b (B, K, N): the textbook triple loop per
// batch, any strides (a batch stride of 0 broadcasts one matrix over the batch).
#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

void matmul(const View& out, const View& a, const View& b) {
  check_rank(out, 3, "matmul");
  check_rank(a, 3, "matmul");
  check_rank(b, 3, "matmul");
  const int64_t B = out.shape[0], M = out.shape[1], N = out.shape[2], K = a.shape[2];
  check(a.shape[0] == B && a.shape[1] == M && b.shape[0] == B && b.shape[1] == K &&
            b.shape[2] == N,
        "matmul", "shapes " + shape_str(out.shape) + " = " + shape_str(a.shape) + " @ " +
                      shape_str(b.shape));
  const bool ints = !is_floating(out.dtype);
  for (int64_t bi = 0; bi < B; ++bi) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const int64_t a_row = bi * a.strides[0] + m * a.strides[1];
        const int64_t b_col = bi * b.strides[0] + n * b.strides[2];
        const int64_t o = bi * out.strides[0] + m * out.strides[1] + n * out.strides[2];
        if (ints) {
          int64_t acc = 0;
          for (int64_t k = 0; k < K; ++k) {
            acc += strided::load_i64(a, a_row + k * a.strides[2]) *
                   strided::load_i64(b, b_col + k * b.strides[1]);
          }
          strided::store_i64(out, o, acc);
        } else {
          double acc = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            acc += strided::load_f64(a, a_row + k * a.strides[2]) *
                   strided::load_f64(b, b_col + k * b.strides[1]);
          }
          strided::store_f64(out, o, acc);
        }
      }
    }
  }
}

void matmul_bias(const View& out, const View& a, const View& b, const View& bias, bool relu) {
  const char* op = "matmul_bias";
  check_rank(out, 2, op);
  check_rank(a, 2, op);
  check_rank(b, 2, op);
  check_rank(bias, 1, op);
  const int64_t M = out.shape[0], N = out.shape[1], K = a.shape[1];
  check(a.shape[0] == M && b.shape[0] == K && b.shape[1] == N && bias.shape[0] == N, op,
        "shapes " + shape_str(out.shape) + " = " + shape_str(a.shape) + " @ " + shape_str(b.shape) + " + " +
            shape_str(bias.shape));
  check(is_floating(out.dtype) && a.dtype == out.dtype && b.dtype == out.dtype && bias.dtype == out.dtype, op,
        "needs one floating dtype for all operands");
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = strided::load_f64(bias, n * bias.strides[0]);
      for (int64_t k = 0; k < K; ++k)
        acc += strided::load_f64(a, m * a.strides[0] + k * a.strides[1]) *
               strided::load_f64(b, k * b.strides[0] + n * b.strides[1]);
      strided::store_f64(out, m * out.strides[0] + n * out.strides[1], relu && acc < 0 ? 0.0 : acc);
    }
  }
}

}  // namespace ringflow::reference
