// Batched matmul over oneDNN: out (B, M, N) = a (B, M, K) @ b (B, K, N), any strides.
// A batch stride of 0 on a or b is oneDNN's batch broadcast (that operand's batch dim 1).
// Strided operands (e.g. transposed weights) are handed to oneDNN as they are; only if
// oneDNN has no implementation for those strides are a and b copied contiguous.
#include <optional>
#include <algorithm>

#include "ringflow/kernels/cpu/widen.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"

namespace ringflow::cpu {
namespace {

using md = dnnl::memory::desc;
using MatmulPd = dnnl::matmul::primitive_desc;

bool batch_broadcast(const View& v) { return v.shape[0] > 1 && v.strides[0] == 0; }

// (B, R, C) with the batch dim 1 when broadcast; strides of size-1 dims made plain.
md matmul_md(const View& v) {
  const bool bc = batch_broadcast(v);
  const int64_t B = bc ? 1 : v.shape[0], R = v.shape[1], C = v.shape[2];
  int64_t sr = v.strides[1], sc = v.strides[2];
  if (C == 1) sc = 1;
  if (R == 1) sr = sc == 1 ? C : 1;
  if (C == 1 && R > 1) sc = sr == 1 ? R : 1;
  int64_t sb = bc || B == 1 ? std::max(R * sr, C * sc) : v.strides[0];
  if (sb == 0) sb = std::max(R * sr, C * sc);
  return md({B, R, C}, to_dnnl(v.dtype), {sb, sr, sc});
}

const CachedPrimitive* matmul_primitive(const View& out, const View& a, const View& b) {
  KeyBuilder k("matmul");
  k.add(out).add(a).add(b);
  auto ctx = [&] { return describe("matmul out a b", {&out, &a, &b}); };
  return lookup(k.str(), ctx, [&] {
    try {
      dnnl::matmul::desc d(matmul_md(a), matmul_md(b), matmul_md(out));
      auto pd = std::make_shared<MatmulPd>(d, dnnl_engine());
      return CachedPrimitive{dnnl::matmul(*pd), pd};
    } catch (const dnnl::error&) {
      return CachedPrimitive{};  // strides or broadcast oneDNN does not take: fall back
    }
  });
}

void run(const CachedPrimitive& prim, const View& out, const View& a, const View& b) {
  const MatmulPd& pd = prim.get<MatmulPd>();
  auto& e = dnnl_engine();
  execute(prim,
          {{DNNL_ARG_SRC, dnnl::memory(pd.src_desc(), e, a.data)},
           {DNNL_ARG_WEIGHTS, dnnl::memory(pd.weights_desc(), e, b.data)},
           {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), e, out.data)}},
          [&] { return describe("matmul out a b", {&out, &a, &b}); });
}

// A contiguous copy of v (batch dim 1 when broadcast).
View contiguous_copy(const View& v, ScratchBuffer& buf) {
  View src = v;
  if (batch_broadcast(v)) src.shape[0] = 1;
  View dst = src;
  dst.strides = {src.shape[1] * src.shape[2], src.shape[2], 1};
  dst.derived = nullptr;
  buf = ScratchBuffer(std::max<size_t>(1, src.numel() * dtype_size(v.dtype)));
  dst.data = buf.data();
  copy(dst, src);
  if (batch_broadcast(v)) {  // broadcast again over the batch
    dst.shape[0] = v.shape[0];
    dst.strides[0] = 0;
  }
  return dst;
}

}  // namespace

void matmul(const View& out, const View& a, const View& b) {
  if (any_widens({&out, &a, &b})) {
    const Widened wo(out, false), wa(a, true), wb(b, true);
    matmul(wo.view(), wa.view(), wb.view());
    return wo.finish();
  }
  const bool ok = out.dim() == 3 && a.dim() == 3 && b.dim() == 3 && dnnl_supports(out.dtype) &&
                  a.dtype == out.dtype && b.dtype == out.dtype && out.numel() > 0 &&
                  a.shape[2] > 0 && (out.shape[0] == 1 || out.strides[0] != 0) &&
                  out.strides[1] >= 0 && out.strides[2] >= 0;
  if (!ok) return reference_backend().matmul(out, a, b);
  if (const CachedPrimitive* p = matmul_primitive(out, a, b)) return run(*p, out, a, b);
  // oneDNN rejected these strides: copy a and b contiguous.
  ScratchBuffer abuf, bbuf;
  const View ac = contiguous_copy(a, abuf), bc = contiguous_copy(b, bbuf);
  if (const CachedPrimitive* p = matmul_primitive(out, ac, bc)) return run(*p, out, ac, bc);
  reference_backend().matmul(out, a, b);
}

}  // namespace ringflow::cpu
