// Internal to comm/ (not installed; only in builds with CUDA): ringflow's dtypes and reduce
// ops in NCCL's terms, and NCCL's results as messages that say what to do.
#pragma once

#include <nccl.h>

#include <string>

#include "ringflow/comm/base/types.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow::comm::detail {

// Every ringflow dtype has an NCCL type: f32 ncclFloat32, f64 ncclFloat64, f16 ncclFloat16,
// bf16 ncclBfloat16, i32 ncclInt32, i64 ncclInt64.
ncclDataType_t nccl_dtype(DType dtype);
// sum ncclSum, avg ncclAvg, max ncclMax, min ncclMin.
ncclRedOp_t nccl_op(ReduceOp op);

// What usually causes `code` and what to do about it ("" for ncclSuccess).
const char* nccl_error_hint(ncclResult_t code);
// "<call> failed: <ncclGetErrorString> (NCCL error N); NCCL says: <last_error>. <hint>"
// (the middle part only when last_error is neither null nor empty).
std::string nccl_error_message(const std::string& call, ncclResult_t code, const char* last_error);

}  // namespace ringflow::comm::detail
