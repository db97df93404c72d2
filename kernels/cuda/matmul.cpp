// out (B, M, N) = a (B, M, K) @ b (B, K, N) on cuBLAS, f32, f64, f16 and bf16 (f32
// accumulation): one strided-batched GEMM (Note [Row-major matmul on column-major cuBLAS] in gemm_plan.h). Operands whose
// strides have no GEMM description are copied contiguous on the device first; an out that
// is not row-major gets a contiguous temporary, copied into it afterwards.
// f32 runs in full f32 (CUBLAS_COMPUTE_32F does not use TF32 tensor cores), so results
// compare with the CPU backend's, unless set_allow_tf32(true) (CUBLAS_COMPUTE_32F_FAST_TF32).
#include <optional>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/cublas_context.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/gemm_plan.h"

namespace ringflow::cuda {
namespace {

cublasOperation_t op(const GemmOperand& x) { return x.transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The element type of a dtype, and the compute type: f32 accumulation for f32 (TF32 tensor
// cores only when allow_tf32(), read per call so that no handle state is shared between
// threads), f16 and bf16; f64 for f64.
cudaDataType data_type(DType dt) {
  switch (dt) {
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}
cublasComputeType_t compute_type(DType dt) {
  if (dt == DType::f64) return CUBLAS_COMPUTE_64F;
  if (dt == DType::f32 && allow_tf32()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

void run(const GemmPlan& p, const View& out, const View& a, const View& b) {
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool f64 = out.dtype == DType::f64;  // alpha and beta in the compute type
  const cudaDataType t = data_type(out.dtype);
  RF_CHECK_CUBLAS(cublasGemmStridedBatchedEx_64(
      cublas_handle(), op(p.a), op(p.b), p.m, p.n, p.k,
      f64 ? static_cast<const void*>(&one64) : &one32, b.data, t, p.a.ld, p.a.batch_stride,
      a.data, t, p.b.ld, p.b.batch_stride, f64 ? static_cast<const void*>(&zero64) : &zero32,
      out.data, t, p.c.ld, p.c.batch_stride, p.batch, compute_type(out.dtype),
      CUBLAS_GEMM_DEFAULT));
}

// A row-major view of x's shape over a new `buffer`, not filled.
View row_major_like(const View& x, std::optional<DeviceBuffer>& buffer) {
  View v = x;
  v.strides = {x.shape[1] * x.shape[2], x.shape[2], 1};
  v.derived = nullptr;
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
  if (!is_floating(out.dtype))
    fail(std::string("dtype ") + dtype_name(out.dtype) + " not implemented (f32, f64, f16, bf16 are)");
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
