// Softmax and log-softmax along one dim over oneDNN (softmax_* and logsoftmax_*), on the
// Views' own strides. oneDNN describes src and dst with one desc, so y follows x's
// layout (and dy follows dx's); a mismatching operand goes through a scratch copy.
// oneDNN's row maximum drops a NaN, a row with +inf or of -inf only does not come out all
// NaN as PyTorch's, and its exp clamps a NaN: forward with an x, backward with a y that is
// not all finite go to the reference kernel.
#include "ringflow/kernels/cpu/cpu_kernels.h"

namespace ringflow::cpu {

void softmax_forward(const View& y, const View& x, int64_t dim, bool log) {
  if (!dnnl_friendly({&y, &x}) || x.dtype != y.dtype || x.dim() < 1 || x.dim() > 5 ||
      !all_finite(x)) {
    return reference_backend().softmax_forward(y, x, dim, log);
  }
  KeyBuilder k("softmax_forward");
  k.add(x).add(y).add(dim).add(log);
  auto ctx = [&] { return describe(log ? "log_softmax_forward y x" : "softmax_forward y x", {&y, &x}); };
  const int axis = static_cast<int>(dim);
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    if (log) {
      dnnl::logsoftmax_forward::desc d(dnnl::prop_kind::forward_training, md_of(x), axis);
      auto pd = std::make_shared<dnnl::logsoftmax_forward::primitive_desc>(d, dnnl_engine());
      return CachedPrimitive{dnnl::logsoftmax_forward(*pd), pd};
    }
    dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_training, md_of(x), axis);
    auto pd = std::make_shared<dnnl::softmax_forward::primitive_desc>(d, dnnl_engine());
    return CachedPrimitive{dnnl::softmax_forward(*pd), pd};
  });
  if (!prim) return reference_backend().softmax_forward(y, x, dim, log);
  const dnnl::memory::desc data = md_of(x);
  Operand dst(y, data, /*is_input=*/false, "softmax_forward");
  execute(*prim, {{DNNL_ARG_SRC, dnnl::memory(data, dnnl_engine(), x.data)}, {DNNL_ARG_DST, dst.mem()}},
          ctx);
  dst.finish();
}

void softmax_backward(const View& dx, const View& dy, const View& y, int64_t dim, bool log) {
  if (!dnnl_friendly({&dx, &dy, &y}) || dx.dtype != dy.dtype || dx.dtype != y.dtype ||
      y.dim() < 1 || y.dim() > 5 || !all_finite(y)) {
    return reference_backend().softmax_backward(dx, dy, y, dim, log);
  }
  KeyBuilder k("softmax_backward");
  k.add(dx).add(dy).add(y).add(dim).add(log);
  auto ctx = [&] {
    return describe(log ? "log_softmax_backward dx dy y" : "softmax_backward dx dy y", {&dx, &dy, &y});
  };
  const int axis = static_cast<int>(dim);
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    if (log) {
      dnnl::logsoftmax_forward::desc fd(dnnl::prop_kind::forward_training, md_of(y), axis);
      dnnl::logsoftmax_forward::primitive_desc hint(fd, dnnl_engine());
      dnnl::logsoftmax_backward::desc d(md_of(dx), md_of(y), axis);
      auto pd = std::make_shared<dnnl::logsoftmax_backward::primitive_desc>(d, dnnl_engine(), hint);
      return CachedPrimitive{dnnl::logsoftmax_backward(*pd), pd};
    }
    dnnl::softmax_forward::desc fd(dnnl::prop_kind::forward_training, md_of(y), axis);
    dnnl::softmax_forward::primitive_desc hint(fd, dnnl_engine());
    dnnl::softmax_backward::desc d(md_of(dx), md_of(y), axis);
    auto pd = std::make_shared<dnnl::softmax_backward::primitive_desc>(d, dnnl_engine(), hint);
    return CachedPrimitive{dnnl::softmax_backward(*pd), pd};
  });
  if (!prim) return reference_backend().softmax_backward(dx, dy, y, dim, log);
  const dnnl::memory::desc diff = md_of(dx);
  Operand diff_dst(dy, diff, /*is_input=*/true, "softmax_backward");
  execute(*prim,
          {{DNNL_ARG_DST, dnnl::memory(md_of(y), dnnl_engine(), y.data)},
           {DNNL_ARG_DIFF_DST, diff_dst.mem()},
           {DNNL_ARG_DIFF_SRC, dnnl::memory(diff, dnnl_engine(), dx.data)}},
          ctx);
}

}  // namespace ringflow::cpu
