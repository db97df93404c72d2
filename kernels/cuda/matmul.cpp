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

#include <cublasLt.h>

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
cublasComputeType_t compute_type(DType dt, bool tf32 = allow_tf32()) {
  if (dt == DType::f64) return CUBLAS_COMPUTE_64F;
  if (dt == DType::f32 && tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

void run(const GemmPlan& p, const View& out, const View& a, const View& b, bool tf32) {
  const double one64 = 1, zero64 = 0;
  const float one32 = 1, zero32 = 0;
  const bool f64 = out.dtype == DType::f64;  // alpha and beta in the compute type
  const cudaDataType t = data_type(out.dtype);
  RF_CHECK_CUBLAS(cublasGemmStridedBatchedEx_64(
      cublas_handle(), op(p.a), op(p.b), p.m, p.n, p.k,
      f64 ? static_cast<const void*>(&one64) : &one32, b.data, t, p.a.ld, p.a.batch_stride,
      a.data, t, p.b.ld, p.b.batch_stride, f64 ? static_cast<const void*>(&zero64) : &zero32,
      out.data, t, p.c.ld, p.c.batch_stride, p.batch, compute_type(out.dtype, tf32),
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

// cuBLASLt's handle: cuBLAS's, which holds one (as PyTorch takes it), on the compute stream.
cublasLtHandle_t lt_handle() { return reinterpret_cast<cublasLtHandle_t>(cublas_handle()); }

// Frees a cuBLASLt descriptor at the end of its scope.
template <class T, cublasStatus_t (*destroy)(T)>
struct LtDesc {
  T d = nullptr;
  ~LtDesc() {
    if (d) (void)destroy(d);
  }
};

// The stored matrix of a plan's operand, rows x cols column-major: op(X) is rows_op x cols_op.
void set_layout(LtDesc<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>& l, cudaDataType t,
                const GemmOperand& x, int64_t rows_op, int64_t cols_op) {
  const uint64_t rows = static_cast<uint64_t>(x.transpose ? cols_op : rows_op);
  const uint64_t cols = static_cast<uint64_t>(x.transpose ? rows_op : cols_op);
  RF_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&l.d, t, rows, cols, x.ld));
}

// One cuBLASLt matmul with the bias (and relu) epilogue for a plan of one batch entry; false
// when cuBLASLt's heuristic has no algorithm for it (the caller composes).
bool run_with_epilogue(const GemmPlan& p, const View& out, const View& a, const View& b, const View& bias,
                       bool relu) {
  const cudaDataType t = data_type(out.dtype);
  LtDesc<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op_desc;
  RF_CHECK_CUBLAS(cublasLtMatmulDescCreate(&op_desc.d, compute_type(out.dtype), CUDA_R_32F));
  const cublasOperation_t ta = op(p.a), tb = op(p.b);
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  const void* bias_ptr = bias.data;
  RF_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op_desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  RF_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op_desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  RF_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op_desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  RF_CHECK_CUBLAS(
      cublasLtMatmulDescSetAttribute(op_desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof bias_ptr));
  LtDesc<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, lc;
  set_layout(la, t, p.a, p.m, p.k);  // cuBLAS's A: our b
  set_layout(lb, t, p.b, p.k, p.n);  // cuBLAS's B: our a
  set_layout(lc, t, p.c, p.m, p.n);
  constexpr size_t kWorkspace = kCublasWorkspaceBytes;
  LtDesc<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
  RF_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref.d));
  RF_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &kWorkspace, sizeof kWorkspace));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt_handle(), op_desc.d, la.d, lb.d, lc.d, lc.d,
                                                                pref.d, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  RF_CHECK_CUBLAS(status);
  const float one = 1, zero = 0;
  RF_CHECK_CUBLAS(cublasLtMatmul(lt_handle(), op_desc.d, &one, b.data, la.d, a.data, lb.d, &zero, out.data, lc.d,
                                 out.data, lc.d, &heuristic.algo, cublas_workspace(), heuristic.workspaceSize,
                                 compute_stream()));
  return true;
}

// x (R, C) as one batch entry (1, R, C).
View batch_of_one(const View& x) {
  View v = x;
  v.shape.insert(v.shape.begin(), 1);
  v.strides.insert(v.strides.begin(), x.numel());
  return v;
}

}  // namespace

void matmul_bias(const View& out, const View& a, const View& b, const View& bias, bool relu) {
  if (out.dim() != 2 || a.dim() != 2 || b.dim() != 2 || bias.dim() != 1 || a.shape[0] != out.shape[0] ||
      b.shape[1] != out.shape[1] || a.shape[1] != b.shape[0] || bias.shape[0] != out.shape[1] ||
      bias.dtype != out.dtype)
    throw std::invalid_argument("matmul_bias on cuda: out " + shape_str(out.shape) + " = a " + shape_str(a.shape) +
                                " @ b " + shape_str(b.shape) + " + bias " + shape_str(bias.shape) +
                                " of one dtype");
  const View o3 = batch_of_one(out), a3 = batch_of_one(a), b3 = batch_of_one(b);
  check_args(o3, a3, b3);
  if (out.numel() == 0) return;
  const auto plan = a.shape[1] > 0 && out.dtype != DType::f64 && bias.is_contiguous() ? plan_gemm(o3, a3, b3)
                                                                                       : std::nullopt;
  if (plan && run_with_epilogue(*plan, out, a, b, bias, relu)) return;
  // f64, an empty sum, operands without a GEMM layout, no cuBLASLt algorithm: composed.
  matmul(o3, a3, b3);
  View row = bias;  // bias broadcast over out's rows
  row.shape = out.shape;
  row.strides = {0, bias.strides[0]};
  const Backend& k = *cuda_backend();
  k.binary(BinaryOp::add, out, out, row);
  if (relu) k.unary(UnaryOp::relu, out, out);
}

void matmul(const View& out, const View& a, const View& b) { matmul(out, a, b, allow_tf32()); }

void matmul(const View& out, const View& a, const View& b, bool tf32) {
  check_args(out, a, b);
  if (out.numel() == 0) return;
  if (a.shape[2] == 0) return fill(out, 0.0);  // empty sums
  std::optional<DeviceBuffer> a_copy, b_copy, out_temp;
  const View ac = gemm_operand(a) ? a : contiguous(a, a_copy);
  const View bc = gemm_operand(b) ? b : contiguous(b, b_copy);
  if (const auto plan = plan_gemm(out, ac, bc)) return run(*plan, out, ac, bc, tf32);
  const View temp = row_major_like(out, out_temp);  // out is not row-major
  run(*plan_gemm(temp, ac, bc), temp, ac, bc, tf32);
  copy(out, temp);
}

}  // namespace ringflow::cuda
