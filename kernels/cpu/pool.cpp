// Max and average 2-D pooling over oneDNN (pooling_v2, dilation 0), PyTorch semantics.
//
// Note [pooling ceil_mode]: PyTorch's output size P (given by y) fixes the right padding
// oneDNN needs: pad_r = max(pad, (P - 1) * stride + kernel - H - pad). oneDNN treats the
// ceil overhang like padding: max ignores it (-inf) and avg_exclude_padding does not count
// it, both as PyTorch. avg with count_include_pad divides by the full kernel in oneDNN,
// while PyTorch does not count the overhang; that one case goes to the reference kernel.
//
// Max pooling runs as forward_training and returns oneDNN's workspace (argmax indices),
// which backward consumes; the workspace remembers the layout it was computed in.
// oneDNN's max drops a NaN of a window, where PyTorch's picks it (and sends it the
// gradient): an input that is not all finite goes to the reference kernel.
#include <algorithm>
#include <optional>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/staged_view.h"
#include "ringflow/kernels/cpu/widen.h"

namespace ringflow::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;
using FwdPd = dnnl::pooling_v2_forward::primitive_desc;
using BwdPd = dnnl::pooling_v2_backward::primitive_desc;

struct Geometry {
  dnnl::memory::dims strides, kernel, dilation, pad_l, pad_r;
  bool overhang = false;  // a window reaches past H + pad (ceil_mode)
};

// x (N, C, H, W) pooled to (N, C, P, Q).
Geometry geometry(const Shape& x, const Shape& y, const Pool2dParams& p) {
  const int64_t H = x[2], W = x[3], P = y[2], Q = y[3];
  const int64_t rh = std::max(p.pad_h, (P - 1) * p.stride_h + p.kernel_h - H - p.pad_h);
  const int64_t rw = std::max(p.pad_w, (Q - 1) * p.stride_w + p.kernel_w - W - p.pad_w);
  return {{p.stride_h, p.stride_w}, {p.kernel_h, p.kernel_w}, {0, 0}, {p.pad_h, p.pad_w},
          {rh, rw}, rh > p.pad_h || rw > p.pad_w};
}

algorithm avg_algorithm(const Pool2dParams& p) {
  return p.count_include_pad ? algorithm::pooling_avg_include_padding
                             : algorithm::pooling_avg_exclude_padding;
}

// x: the input-shaped operand (x or dx), y: the output-shaped one (y or dy).
bool pool_ok(const View& x, const View& y, const Pool2dParams& p, bool avg) {
  if (!(dnnl_friendly({&x, &y}) && x.dim() == 4 && y.dim() == 4 && x.dtype == y.dtype)) return false;
  if (avg && p.count_include_pad && geometry(x.shape, y.shape, p).overhang) return false;
  return true;
}

KeyBuilder& add_params(KeyBuilder& k, const Pool2dParams& p) {
  return k.add(p.kernel_h).add(p.kernel_w).add(p.stride_h).add(p.stride_w).add(p.pad_h)
      .add(p.pad_w).add(p.ceil_mode).add(p.count_include_pad);
}

FwdPd make_fwd_pd(algorithm alg, const View& x, const View& y, tag t, const Pool2dParams& p) {
  const Geometry g = geometry(x.shape, y.shape, p);
  dnnl::pooling_v2_forward::desc d(prop_kind::forward_training, alg, md_of(x, t), md_of(y, t),
                                   g.strides, g.kernel, g.dilation, g.pad_l, g.pad_r);
  return FwdPd(d, dnnl_engine());
}

tag compute_layout(const View& out, const View& in) {
  tag t = layout_of(out);
  if (t == tag::undef) t = layout_of(in);
  return t == tag::undef ? tag::nhwc : t;
}

// What max_pool2d_forward returns: oneDNN's workspace and the layout it was computed
// in, or the reference kernel's workspace when forward fell back.
struct MaxPoolWorkspace {
  bool dnnl = false;
  tag layout = tag::undef;
  ScratchBuffer buffer;
  Workspace reference;
};

const CachedPrimitive* forward_primitive(algorithm alg, const View& y, const View& x, tag t,
                                         const Pool2dParams& p) {
  KeyBuilder k("pool2d_forward");
  k.add(static_cast<int64_t>(alg)).add(x).add(y).add(static_cast<int64_t>(t));
  add_params(k, p);
  return lookup(k.str(), [&] { return describe("pool2d_forward y x", {&y, &x}); }, [&] {
    auto pd = std::make_shared<FwdPd>(make_fwd_pd(alg, x, y, t, p));
    return CachedPrimitive{dnnl::pooling_v2_forward(*pd), pd};
  });
}

// hint_x / hint_y: the shapes of the forward call, described in layout t.
const CachedPrimitive* backward_primitive(algorithm alg, const View& dx, const View& dy, tag t,
                                          const Pool2dParams& p) {
  KeyBuilder k("pool2d_backward");
  k.add(static_cast<int64_t>(alg)).add(dx).add(dy).add(static_cast<int64_t>(t));
  add_params(k, p);
  return lookup(k.str(), [&] { return describe("pool2d_backward dx dy", {&dx, &dy}); }, [&] {
    const FwdPd hint = make_fwd_pd(alg, dx, dy, t, p);
    const Geometry g = geometry(dx.shape, dy.shape, p);
    dnnl::pooling_v2_backward::desc d(alg, md_of(dx, t), md_of(dy, t), g.strides, g.kernel,
                                      g.dilation, g.pad_l, g.pad_r);
    auto pd = std::make_shared<BwdPd>(d, dnnl_engine(), hint);
    return CachedPrimitive{dnnl::pooling_v2_backward(*pd), pd};
  });
}

// The reference kernels read strides: blocked operands (Note [blocked operands]) go to them as
// contiguous copies. x / dx: input-shaped, y / dy: output-shaped.
Workspace reference_max_forward(const View& y, const View& x, const Pool2dParams& p) {
  const Strided sy(y, false), sx(x, true);
  Workspace ws = reference_backend().max_pool2d_forward(sy.view(), sx.view(), p);
  sy.finish();
  return ws;
}

void reference_max_backward(const View& dx, const View& dy, const View& x, const Workspace& ws,
                            const Pool2dParams& p) {
  const Strided sdx(dx, false), sdy(dy, true), sx(x, true);
  reference_backend().max_pool2d_backward(sdx.view(), sdy.view(), sx.view(), ws, p);
  sdx.finish();
}

void reference_avg_forward(const View& y, const View& x, const std::optional<Pool2dParams>& p) {
  const Strided sy(y, false), sx(x, true);
  if (p) {
    reference_backend().avg_pool2d_forward(sy.view(), sx.view(), *p);
  } else {
    reference_backend().adaptive_avg_pool2d_forward(sy.view(), sx.view());
  }
  sy.finish();
}

void reference_avg_backward(const View& dx, const View& dy, const std::optional<Pool2dParams>& p) {
  const Strided sdx(dx, false), sdy(dy, true);
  if (p) {
    reference_backend().avg_pool2d_backward(sdx.view(), sdy.view(), *p);
  } else {
    reference_backend().adaptive_avg_pool2d_backward(sdx.view(), sdy.view());
  }
  sdx.finish();
}

}  // namespace

Workspace max_pool2d_forward(const View& y, const View& x, const Pool2dParams& p) {
  if (any_widens({&y, &x})) {
    const Widened wy(y, false), wx(x, true);
    Workspace ws = max_pool2d_forward(wy.view(), wx.view(), p);
    wy.finish();
    return ws;
  }
  auto ws = std::make_shared<MaxPoolWorkspace>();
  const tag t = compute_layout(y, x);
  const CachedPrimitive* prim = pool_ok(x, y, p, /*avg=*/false) && all_finite(x)
                                     ? forward_primitive(algorithm::pooling_max, y, x, t, p)
                                     : nullptr;
  if (!prim) {
    ws->reference = reference_max_forward(y, x, p);
    return ws;
  }
  const FwdPd& pd = prim->get<FwdPd>();
  ws->dnnl = true;
  ws->layout = t;
  ws->buffer = ScratchBuffer(std::max<size_t>(1, pd.workspace_desc().get_size()));
  Operand src(x, pd.src_desc(), /*is_input=*/true, "max_pool2d_forward");
  Operand dst(y, pd.dst_desc(), /*is_input=*/false, "max_pool2d_forward");
  execute(*prim,
          {{DNNL_ARG_SRC, src.mem()},
           {DNNL_ARG_DST, dst.mem()},
           {DNNL_ARG_WORKSPACE, dnnl::memory(pd.workspace_desc(), dnnl_engine(), ws->buffer.data())}},
          [&] { return describe("max_pool2d_forward y x", {&y, &x}); });
  dst.finish();
  return ws;
}

void max_pool2d_backward(const View& dx, const View& dy, const View& x, const Workspace& ws,
                         const Pool2dParams& p) {
  if (!ws) throw std::runtime_error("max_pool2d_backward: no workspace from max_pool2d_forward");
  if (any_widens({&dx, &dy, &x})) {
    const Widened wdx(dx, false), wdy(dy, true), wx(x, true);
    max_pool2d_backward(wdx.view(), wdy.view(), wx.view(), ws, p);
    return wdx.finish();
  }
  const auto& w = *static_cast<const MaxPoolWorkspace*>(ws.get());
  if (!w.dnnl || !pool_ok(dx, dy, p, /*avg=*/false)) {
    return reference_max_backward(dx, dy, x, w.reference, p);
  }
  const CachedPrimitive* prim = backward_primitive(algorithm::pooling_max, dx, dy, w.layout, p);
  if (!prim) throw std::runtime_error("max_pool2d_backward: oneDNN has no backward for " +
                                      describe("dx dy", {&dx, &dy}));
  const BwdPd& pd = prim->get<BwdPd>();
  Operand diff_dst(dy, pd.diff_dst_desc(), /*is_input=*/true, "max_pool2d_backward");
  Operand diff_src(dx, pd.diff_src_desc(), /*is_input=*/false, "max_pool2d_backward");
  execute(*prim,
          {{DNNL_ARG_DIFF_DST, diff_dst.mem()},
           {DNNL_ARG_DIFF_SRC, diff_src.mem()},
           {DNNL_ARG_WORKSPACE, dnnl::memory(pd.workspace_desc(), dnnl_engine(), w.buffer.data())}},
          [&] { return describe("max_pool2d_backward dx dy", {&dx, &dy}); });
  diff_src.finish();
}

void avg_pool2d_forward(const View& y, const View& x, const Pool2dParams& p) {
  if (any_widens({&y, &x})) {
    const Widened wy(y, false), wx(x, true);
    avg_pool2d_forward(wy.view(), wx.view(), p);
    return wy.finish();
  }
  if (!pool_ok(x, y, p, /*avg=*/true)) return reference_avg_forward(y, x, p);
  const tag t = compute_layout(y, x);
  const CachedPrimitive* prim = forward_primitive(avg_algorithm(p), y, x, t, p);
  if (!prim) return reference_avg_forward(y, x, p);
  const FwdPd& pd = prim->get<FwdPd>();
  Operand src(x, pd.src_desc(), /*is_input=*/true, "avg_pool2d_forward");
  Operand dst(y, pd.dst_desc(), /*is_input=*/false, "avg_pool2d_forward");
  execute(*prim, {{DNNL_ARG_SRC, src.mem()}, {DNNL_ARG_DST, dst.mem()}},
          [&] { return describe("avg_pool2d_forward y x", {&y, &x}); });
  dst.finish();
}

void avg_pool2d_backward(const View& dx, const View& dy, const Pool2dParams& p) {
  if (any_widens({&dx, &dy})) {
    const Widened wdx(dx, false), wdy(dy, true);
    avg_pool2d_backward(wdx.view(), wdy.view(), p);
    return wdx.finish();
  }
  if (!pool_ok(dx, dy, p, /*avg=*/true)) return reference_avg_backward(dx, dy, p);
  const tag t = compute_layout(dx, dy);
  const CachedPrimitive* prim = backward_primitive(avg_algorithm(p), dx, dy, t, p);
  if (!prim) return reference_avg_backward(dx, dy, p);
  const BwdPd& pd = prim->get<BwdPd>();
  Operand diff_dst(dy, pd.diff_dst_desc(), /*is_input=*/true, "avg_pool2d_backward");
  Operand diff_src(dx, pd.diff_src_desc(), /*is_input=*/false, "avg_pool2d_backward");
  execute(*prim, {{DNNL_ARG_DIFF_DST, diff_dst.mem()}, {DNNL_ARG_DIFF_SRC, diff_src.mem()}},
          [&] { return describe("avg_pool2d_backward dx dy", {&dx, &dy}); });
  diff_src.finish();
}

// Adaptive bins that tile the input evenly (ResNet's global pooling) are plain average
// pooling with kernel = stride = H/P; other sizes go to the reference.
std::optional<Pool2dParams> even_bins(const View& x, const View& y) {
  if (x.dim() != 4 || y.dim() != 4 || y.shape[2] <= 0 || y.shape[3] <= 0) return std::nullopt;
  const int64_t H = x.shape[2], W = x.shape[3], P = y.shape[2], Q = y.shape[3];
  if (H % P != 0 || W % Q != 0) return std::nullopt;
  Pool2dParams p;
  p.kernel_h = p.stride_h = H / P;
  p.kernel_w = p.stride_w = W / Q;
  return p;
}

void adaptive_avg_pool2d_forward(const View& y, const View& x) {
  if (const auto p = even_bins(x, y)) return avg_pool2d_forward(y, x, *p);
  reference_avg_forward(y, x, std::nullopt);
}

void adaptive_avg_pool2d_backward(const View& dx, const View& dy) {
  if (const auto p = even_bins(dx, dy)) return avg_pool2d_backward(dx, dy, *p);
  reference_avg_backward(dx, dy, std::nullopt);
}

}  // namespace ringflow::cpu
