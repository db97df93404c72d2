// relu and its backward over oneDNN eltwise, for dense operands sharing one layout
// (viewed as 1-D arrays of numel elements, so any dense layout runs the same primitive).
#include "ringflow/kernels/cpu/cpu_kernels.h"

namespace ringflow::cpu {
namespace {

using md = dnnl::memory::desc;
using FwdPd = dnnl::eltwise_forward::primitive_desc;
using BwdPd = dnnl::eltwise_backward::primitive_desc;

md flat_md(const View& v) {
  return md({v.numel()}, to_dnnl(v.dtype), dnnl::memory::format_tag::a);
}

bool flat_ok(std::initializer_list<const View*> views) {
  const View& first = **views.begin();
  if (!dnnl_supports(first.dtype) || first.numel() == 0 || !is_dense(first)) return false;
  for (const View* v : views) {
    if (v->dtype != first.dtype || v->shape != first.shape || v->strides != first.strides) return false;
  }
  return true;
}

}  // namespace

bool eltwise_relu(const View& out, const View& in) {
  if (!flat_ok({&out, &in})) return false;
  const md d = flat_md(in);
  const std::string key = KeyBuilder("relu").add_md(d).str();
  auto ctx = [&] { return describe("relu out in", {&out, &in}); };
  const CachedPrimitive* prim = lookup(key, ctx, [&] {
    dnnl::eltwise_forward::desc ed(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, d, 0.f);
    auto pd = std::make_shared<FwdPd>(ed, dnnl_engine());
    return CachedPrimitive{dnnl::eltwise_forward(*pd), pd};
  });
  if (!prim) return false;
  auto& e = dnnl_engine();
  execute(*prim, {{DNNL_ARG_SRC, dnnl::memory(d, e, in.data)}, {DNNL_ARG_DST, dnnl::memory(d, e, out.data)}},
          ctx);
  return true;
}

bool eltwise_relu_backward(const View& dx, const View& dy, const View& x) {
  if (!flat_ok({&dx, &dy, &x})) return false;
  const md d = flat_md(x);
  const std::string key = KeyBuilder("relu_backward").add_md(d).str();
  auto ctx = [&] { return describe("relu_backward dx dy x", {&dx, &dy, &x}); };
  const CachedPrimitive* prim = lookup(key, ctx, [&] {
    dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, d, 0.f);
    FwdPd hint(fd, dnnl_engine());
    dnnl::eltwise_backward::desc bd(dnnl::algorithm::eltwise_relu, d, d, 0.f);
    auto pd = std::make_shared<BwdPd>(bd, dnnl_engine(), hint);
    return CachedPrimitive{dnnl::eltwise_backward(*pd), pd};
  });
  if (!prim) return false;
  auto& e = dnnl_engine();
  execute(*prim,
          {{DNNL_ARG_SRC, dnnl::memory(d, e, x.data)},
           {DNNL_ARG_DIFF_DST, dnnl::memory(d, e, dy.data)},
           {DNNL_ARG_DIFF_SRC, dnnl::memory(d, e, dx.data)}},
          ctx);
  return true;
}

}  // namespace ringflow::cpu
