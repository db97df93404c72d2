// Batch normalization over oneDNN: per channel C of a 4-D x (N, C, H, W) in its own layout
// (nhwc, nchw or blocked), or of a 2-D x (N, C). oneDNN's variance is biased, as the contract's;
// gamma/beta map to use_scale/use_shift; eval uses use_global_stats.
#include <bit>
#include <string>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/staged_view.h"
#include "ringflow/kernels/cpu/widen.h"

namespace ringflow::cpu {
namespace {

using dnnl::prop_kind;
using flags = dnnl::normalization_flags;
using tag = dnnl::memory::format_tag;
using md = dnnl::memory::desc;
using FwdPd = dnnl::batch_normalization_forward::primitive_desc;
using BwdPd = dnnl::batch_normalization_backward::primitive_desc;

// The layout x is computed in (all other activations follow it).
md data_md(const View& x) {
  if (x.dim() == 4) {
    tag t = layout_of(x);
    return md_of(x, t == tag::undef ? tag::nhwc : t);
  }
  return md_of(x, tag::ab);
}

md stat_md(const View& x) { return md({x.shape[1]}, dnnl::memory::data_type::f32, tag::a); }

bool f32_vector(const View* v) {
  return !v || (v->dim() == 1 && v->dtype == DType::f32 && dnnl_friendly({v}));
}

bool bn_ok(const View& x, std::initializer_list<const View*> acts,
           std::initializer_list<const View*> vectors) {
  if (!(x.dim() == 4 || x.dim() == 2) || !dnnl_friendly({&x})) return false;
  for (const View* a : acts) {
    if (!dnnl_friendly({a}) || a->dtype != x.dtype || a->shape != x.shape) return false;
  }
  for (const View* v : vectors) {
    if (!f32_vector(v)) return false;
  }
  return true;
}

FwdPd make_fwd_pd(const View& x, prop_kind prop, flags f, double eps) {
  dnnl::batch_normalization_forward::desc d(prop, data_md(x), static_cast<float>(eps), f);
  return FwdPd(d, dnnl_engine());
}

// Training computes mean and var (outputs); eval reads them (use_global_stats). False
// where oneDNN does not take these operands: the caller falls back to the reference.
bool forward(const View& y, const View& x, const View& mean, const View& var, const View* gamma,
             const View* beta, double eps, bool training) {
  if (!bn_ok(x, {&y}, {&mean, &var, gamma, beta})) return false;
  const char* op = training ? "batch_norm_forward_train" : "batch_norm_forward_eval";
  flags f = training ? flags::none : flags::use_global_stats;
  if (gamma) f = f | flags::use_scale;
  if (beta) f = f | flags::use_shift;
  KeyBuilder k(op);
  k.add(x).add(y).add(static_cast<int64_t>(f)).add(std::bit_cast<int64_t>(eps));
  const std::string what = std::string(op) + " y x";
  auto ctx = [&] { return describe(what.c_str(), {&y, &x}); };
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    const prop_kind prop = training ? prop_kind::forward_training : prop_kind::forward_inference;
    auto pd = std::make_shared<FwdPd>(make_fwd_pd(x, prop, f, eps));
    return CachedPrimitive{dnnl::batch_normalization_forward(*pd), pd};
  });
  if (!prim) return false;
  const FwdPd& pd = prim->get<FwdPd>();
  Operand src(x, pd.src_desc(), true, op), dst(y, pd.dst_desc(), false, op);
  Operand m(mean, stat_md(x), !training, op), v(var, stat_md(x), !training, op);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src.mem()},
                                             {DNNL_ARG_DST, dst.mem()},
                                             {DNNL_ARG_MEAN, m.mem()},
                                             {DNNL_ARG_VARIANCE, v.mem()}};
  std::unique_ptr<Operand> g, b;
  if (gamma) args[DNNL_ARG_SCALE] = (g = std::make_unique<Operand>(*gamma, stat_md(x), true, op))->mem();
  if (beta) args[DNNL_ARG_SHIFT] = (b = std::make_unique<Operand>(*beta, stat_md(x), true, op))->mem();
  execute(*prim, args, ctx);
  dst.finish();
  if (training) {
    m.finish();
    v.finish();
  }
  return true;
}

// The reference kernels read strides: blocked operands (Note [blocked operands]) go to them as
// contiguous copies.
void reference_forward(const View& y, const View& mean, const View& var, const View& x,
                       const View* gamma, const View* beta, double eps, bool training) {
  const Strided sy(y, false), sx(x, true);
  if (training) {
    reference_backend().batch_norm_forward_train(sy.view(), mean, var, sx.view(), gamma, beta, eps);
  } else {
    reference_backend().batch_norm_forward_eval(sy.view(), sx.view(), mean, var, gamma, beta, eps);
  }
  sy.finish();
}

void reference_backward(const View& dx, const View* dgamma, const View* dbeta, const View& dy,
                        const View& x, const View& mean, const View& var, const View* gamma,
                        double eps) {
  const Strided sdx(dx, false), sdy(dy, true), sx(x, true);
  reference_backend().batch_norm_backward(sdx.view(), dgamma, dbeta, sdy.view(), sx.view(), mean,
                                          var, gamma, eps);
  sdx.finish();
}

}  // namespace

void batch_norm_forward_train(const View& y, const View& mean, const View& var, const View& x,
                              const View* gamma, const View* beta, double eps) {
  if (any_widens({&y, &x})) {
    const Widened wy(y, false), wx(x, true);
    batch_norm_forward_train(wy.view(), mean, var, wx.view(), gamma, beta, eps);
    return wy.finish();
  }
  if (!forward(y, x, mean, var, gamma, beta, eps, /*training=*/true)) {
    reference_forward(y, mean, var, x, gamma, beta, eps, /*training=*/true);
  }
}

void batch_norm_forward_eval(const View& y, const View& x, const View& mean, const View& var,
                             const View* gamma, const View* beta, double eps) {
  if (any_widens({&y, &x})) {
    const Widened wy(y, false), wx(x, true);
    batch_norm_forward_eval(wy.view(), wx.view(), mean, var, gamma, beta, eps);
    return wy.finish();
  }
  if (!forward(y, x, mean, var, gamma, beta, eps, /*training=*/false)) {
    reference_forward(y, mean, var, x, gamma, beta, eps, /*training=*/false);
  }
}

void batch_norm_backward(const View& dx, const View* dgamma, const View* dbeta, const View& dy,
                         const View& x, const View& mean, const View& var, const View* gamma,
                         double eps) {
  if (any_widens({&dx, &dy, &x})) {
    const Widened wdx(dx, false), wdy(dy, true), wx(x, true);
    batch_norm_backward(wdx.view(), dgamma, dbeta, wdy.view(), wx.view(), mean, var, gamma, eps);
    return wdx.finish();
  }
  // Without gamma the scale is 1 and there is no dgamma to give.
  if (!bn_ok(x, {&dx, &dy}, {&mean, &var, gamma, dgamma, dbeta}) || (dgamma && !gamma)) {
    return reference_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, eps);
  }
  flags f = flags::none;
  if (gamma) f = f | flags::use_scale;
  if (dbeta) f = f | flags::use_shift;
  const prop_kind prop = f == flags::none ? prop_kind::backward_data : prop_kind::backward;
  KeyBuilder k("batch_norm_backward");
  k.add(x).add(dx).add(dy).add(static_cast<int64_t>(f)).add(std::bit_cast<int64_t>(eps));
  auto ctx = [&] { return describe("batch_norm_backward dx dy x", {&dx, &dy, &x}); };
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    const FwdPd hint = make_fwd_pd(x, prop_kind::forward_training, f, eps);
    dnnl::batch_normalization_backward::desc d(prop, data_md(x), data_md(x),
                                               static_cast<float>(eps), f);
    auto pd = std::make_shared<BwdPd>(d, dnnl_engine(), hint);
    return CachedPrimitive{dnnl::batch_normalization_backward(*pd), pd};
  });
  if (!prim) {
    return reference_backward(dx, dgamma, dbeta, dy, x, mean, var, gamma, eps);
  }
  const BwdPd& pd = prim->get<BwdPd>();
  const char* op = "batch_norm_backward";
  Operand src(x, pd.src_desc(), true, op), diff_dst(dy, pd.diff_dst_desc(), true, op);
  Operand diff_src(dx, pd.diff_src_desc(), false, op);
  Operand m(mean, stat_md(x), true, op), v(var, stat_md(x), true, op);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src.mem()},
                                             {DNNL_ARG_DIFF_DST, diff_dst.mem()},
                                             {DNNL_ARG_DIFF_SRC, diff_src.mem()},
                                             {DNNL_ARG_MEAN, m.mem()},
                                             {DNNL_ARG_VARIANCE, v.mem()}};
  std::unique_ptr<Operand> g, dg, db;
  ScratchBuffer dg_scratch;
  if (gamma) {
    args[DNNL_ARG_SCALE] = (g = std::make_unique<Operand>(*gamma, stat_md(x), true, op))->mem();
    if (dgamma) {
      args[DNNL_ARG_DIFF_SCALE] =
          (dg = std::make_unique<Operand>(*dgamma, stat_md(x), false, op))->mem();
    } else {  // oneDNN computes it anyway
      dg_scratch = ScratchBuffer(stat_md(x).get_size());
      args[DNNL_ARG_DIFF_SCALE] = dnnl::memory(stat_md(x), dnnl_engine(), dg_scratch.data());
    }
  }
  ScratchBuffer shift_scratch;
  if (dbeta) {
    // oneDNN 2.6 wants a SHIFT argument with use_shift even though dx does not read it.
    shift_scratch = ScratchBuffer(stat_md(x).get_size());
    args[DNNL_ARG_SHIFT] = dnnl::memory(stat_md(x), dnnl_engine(), shift_scratch.data());
    args[DNNL_ARG_DIFF_SHIFT] = (db = std::make_unique<Operand>(*dbeta, stat_md(x), false, op))->mem();
  }
  execute(*prim, args, ctx);
  diff_src.finish();
  if (dg) dg->finish();
  if (db) db->finish();
}

}  // namespace ringflow::cpu
