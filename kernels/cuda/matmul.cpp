// out (B, M, N) = a (B, M, K) @ b (B, K, N) on cuBLAS, f32 and f64: one strided-batched
// GEMM (Note [Row-major matmul on column-major cuBLAS] in gemm_plan.h). Operands whose
// strides have no GEMM description are copied contiguous on the device first; an out that
// is not row-major gets a contiguous temporary, copied into it afterwards.
// f32 runs in full f32 (CUBLAS_DEFAULT_MATH does not use TF32 tensor cores), so results
// compare with the CPU backend's, unless set_allow_tf32(true) (CUBLAS_TF32_TENSOR_OP_MATH).
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_context.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_plan.h"

namespace ringflow::cuda {
namespace {

cublasOperation_t op(const GemmOperand& x) { return x.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

void run(const GemmPlan& p, const View& out, const View& a, const View& b) {
  cublasHandle_t h = cublas_handle();
  if (out.dtype == DType::f32) {
    // Per call, so that set_allow_tf32 takes effect at once on every device's handle.
    RF_CHECK_CUBLAS(
        cublasSetMathMode(h, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    const float one = 1, zero = 0;
    RF_CHECK_CUBLAS(cublasSgemmStridedBatched_64(
        h, op(p.a), op(p.b), p.m, p.n, p.k, &one, static_cast<const float*>(b.data), p.a.ld,
        p.a.batch_stride, static_cast<const float*>(a.data), p.b.ld, p.b.batch_stride, &zero,
        static_cast<float*>(out.data), p.c.ld, p.c.batch_stride, p.batch));
  } else {
    const double one = 1, zero = 0;
    RF_CHECK_CUBLAS(cublasDgemmStridedBatched_64(
        h, op(p.a), op(p.b), p.m, p.n, p.k, &one, static_cast<const double*>(b.data), p.a.ld,
        p.a.batch_stride, static_cast<const double*>(a.data), p.b.ld, p.b.batch_stride, &zero,
        static_cast<double*>(out.data), p.c.ld, p.c.batch_stride, p.batch));
  }
}

// A row-major view of x's shape over a new `buffer`, not filled.
View row_major_like(const View& x, std::optional<DeviceBuffer>& buffer) {
  View v = x;
  v.strides = {x.shape[1] * x.shape[2], x.shape[2], 1};
  v.storage_id = nullptr;
  buffer.emplace(static_cast<size_t>(x.numel()) * dtype_size(x.dtype));
  v.data = buffer->data();
  return v;
}

// A contiguous copy of x in `buffer` (one batch entry when x broadcasts over the batch).
View contiguous(const View& x, std::optional<DeviceBuffer>& buffer) {
  const bool broadcast = x.shape[0] > 1 && x.strides[0] == 0;
  View src = x;
  if (broadcast) src.shape[0] = 1;
  View dst = row_major_like(src, buffer);
  copy(dst, src);
  if (broadcast) {
    dst.shape[0] = x.shape[0];
    dst.strides[0] = 0;
  }
  return dst;
}

void check_args(const View& out, const View& a, const View& b) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("matmul on cuda: " + why + " (out " + shape_str(out.shape) +
                                ", a " + shape_str(a.shape) + ", b " + shape_str(b.shape) + ")");
  };
  if (out.dim() != 3 || a.dim() != 3 || b.dim() != 3) fail("operands must be 3-D (B, M, K)");
  if (a.shape[0] != out.shape[0] || b.shape[0] != out.shape[0] || a.shape[1] != out.shape[1] ||
      b.shape[2] != out.shape[2] || a.shape[2] != b.shape[1])
    fail("shapes do not match (B, M, K) @ (B, K, N) -> (B, M, N)");
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    fail(std::string("dtypes differ: ") + dtype_name(a.dtype) + " @ " + dtype_name(b.dtype) +
         " -> " + dtype_name(out.dtype));
  if (out.dtype != DType::f32 && out.dtype != DType::f64)
    fail(std::string("dtype ") + dtype_name(out.dtype) + " not implemented (f32 and f64 are)");
}

}  // namespace

void matmul(const View& out, const View& a, const View& b) {
  check_args(out, a, b);
  if (out.numel() == 0) return;
  if (a.shape[2] == 0) return fill(out, 0.0);  // empty sums
  std::optional<DeviceBuffer> a_copy, b_copy, out_temp;
  const View ac = gemm_operand(a) ? a : contiguous(a, a_copy);
  const View bc = gemm_operand(b) ? b : contiguous(b, b_copy);
  if (const auto plan = plan_gemm(out, ac, bc)) return run(*plan, out, ac, bc);
  const View temp = row_major_like(out, out_temp);  // out is not row-major
  run(*plan_gemm(temp, ac, bc), temp, ac, bc);
  copy(out, temp);
}

}  // namespace ringflow::cuda
