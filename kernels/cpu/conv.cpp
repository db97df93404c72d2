// 2-D convolution forward / backward-data / backward-weights over oneDNN.
//
// Every operand is described with format_tag::any, so oneDNN computes in its blocked
// layout (nChw8c on AVX2, nChw16c on AVX-512), which runs faster than its direct NHWC
// kernels in f32; activations that the framework keeps in it (conv_blocked_layout, Note
// [blocked operands] in backend.h) are used as they are, others reordered into it and back
// per call (Operand). bf16 channels-last activations, which have no Winograd of oneDNN's
// to lose, keep their layout where oneDNN has a kernel for it (in_own_layout).
// Weights are reordered into the primitive's choice once per version (Note [weight cache]
// in dnnl_context.h). Backward-weights of small channels-last outputs goes to im2col +
// sgemm instead (conv_gemm.cpp), and bf16 3x3 stride-1 layers on CPUs with AVX512-BF16 and
// no AMX to our Winograd kernels (winograd.cpp). The algorithm (direct, or the choice of
// oneDNN and of this file, which includes Winograd) is a process setting: set_conv_algorithm
// in kernels/backend.h.
#include <optional>
#include <atomic>
#include <stdexcept>
#include <string_view>

#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/staged_view.h"
#include "ringflow/kernels/cpu/widen.h"

namespace ringflow {
namespace {
std::atomic<ConvAlgorithm> g_conv_algorithm{ConvAlgorithm::automatic};
}  // namespace

void set_conv_algorithm(ConvAlgorithm algorithm) { g_conv_algorithm.store(algorithm); }
ConvAlgorithm conv_algorithm() { return g_conv_algorithm.load(); }

const char* conv_algorithm_name(ConvAlgorithm algorithm) {
  return algorithm == ConvAlgorithm::direct ? "direct" : "auto";
}

}  // namespace ringflow

namespace ringflow::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;
using md = dnnl::memory::desc;

struct Geometry {
  dnnl::memory::dims strides, dilates, pad_l, pad_r;
};

Geometry geometry(const Conv2dParams& p) {
  return {{p.stride_h, p.stride_w},
          {p.dilation_h - 1, p.dilation_w - 1},
          {p.pad_top, p.pad_left},
          {p.pad_bottom, p.pad_right}};
}

dnnl::algorithm dnnl_algorithm(ConvAlgorithm a) {
  return a == ConvAlgorithm::direct ? algorithm::convolution_direct : algorithm::convolution_auto;
}

// The algorithm for a convolution whose input (forward, backward-weights) or input gradient
// (backward-data) has `channels`: oneDNN's Winograd pads them to its block of 16, so below
// that (an image model's first layer: 3) the direct sums run instead (docs/kernels.md; only
// f32 had taken Winograd there).
ConvAlgorithm algorithm_for(int64_t channels) {
  const ConvAlgorithm a = conv_algorithm();
  return a == ConvAlgorithm::automatic && channels < 16 ? ConvAlgorithm::direct : a;
}

// The key holds the algorithm too, so that switching it takes effect for every shape. Each
// op reads the setting once, for its key and its primitive alike.
KeyBuilder& add_params(KeyBuilder& k, const Conv2dParams& p, ConvAlgorithm a) {
  k.add(int64_t(a)).add(p.stride_h).add(p.stride_w).add(p.pad_top).add(p.pad_bottom);
  k.add(p.pad_left).add(p.pad_right).add(p.dilation_h).add(p.dilation_w);
  return k;
}

md any_layout(const View& v) { return md(dims_of(v), to_dnnl(v.dtype), tag::any); }

md bias_md(const View& b) { return md({b.shape[0]}, to_dnnl(b.dtype), tag::a); }

using FwdPd = dnnl::convolution_forward::primitive_desc;
using BwdDataPd = dnnl::convolution_backward_data::primitive_desc;
using BwdWeightsPd = dnnl::convolution_backward_weights::primitive_desc;

// The forward pd for (x, w, bias?, y), x and y described by xm and ym: the primitive of
// conv2d_forward and the hint of the backward ones.
FwdPd make_fwd_pd(const md& xm, const View& w, const View* bias, const md& ym,
                  const Conv2dParams& p, ConvAlgorithm a, prop_kind prop) {
  const Geometry g = geometry(p);
  const md bmd = bias ? bias_md(*bias) : md();
  dnnl::convolution_forward::desc d(prop, dnnl_algorithm(a), xm, any_layout(w), bmd, ym,
                                    g.strides, g.dilates, g.pad_l, g.pad_r);
  return FwdPd(d, dnnl_engine());
}

// Whether oneDNN's implementation is a JIT kernel of its own (brgconv, jit_bf16, ...), not
// its reference loops or an im2col gemm.
bool jit_kernel(const char* impl) {
  const std::string_view name(impl);
  return name.substr(0, 3) == "jit" || name.substr(0, 3) == "brg";
}

// make(in, out) with the two activations' descriptors: their own channels-last layout where
// both are bf16 in it and oneDNN has a JIT kernel for that, so that nothing is reordered
// around the call; else tag::any, oneDNN's blocked choice, into which Operand reorders them
// per call. On a Zen 4 VM the reorders around ResNet-18's stride-2 and 1x1 layers took
// ~47 ms of a 1.5 s bf16 step (docs/kernels.md). A first layer's NCHW image is not
// channels-last and stays blocked (with one channel it is, and then oneDNN's kernel
// decides). Not on AMX, where this was not measured.
template <class Make>
auto in_own_layout(const View& in, const View& out, const Make& make) {
  if (in.dtype == DType::bf16 && in.is_channels_last() && out.is_channels_last() &&
      !onednn_isa_has(dnnl::cpu_isa::avx512_core_amx)) {
    try {
      auto pd = make(md_of(in), md_of(out));
      if (jit_kernel(pd.impl_info_str())) return pd;
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
  }
  return make(any_layout(in), any_layout(out));
}

// The reference kernels read strides: blocked operands (Note [blocked operands]) go to them as
// contiguous copies.
void reference_forward(const View& y, const View& x, const View& w, const View* bias,
                       const Conv2dParams& p) {
  const Strided sy(y, false), sx(x, true);
  reference_backend().conv2d_forward(sy.view(), sx.view(), w, bias, p);
  sy.finish();
}

void reference_backward_data(const View& dx, const View& dy, const View& w, const Conv2dParams& p) {
  const Strided sdx(dx, false), sdy(dy, true);
  reference_backend().conv2d_backward_data(sdx.view(), sdy.view(), w, p);
  sdx.finish();
}

void reference_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                                const Conv2dParams& p) {
  const Strided sdy(dy, true), sx(x, true);
  reference_backend().conv2d_backward_weights(dw, db, sdy.view(), sx.view(), p);
}

bool conv_ok(const View& a, const View& b, const View& c) {
  return dnnl_friendly({&a, &b, &c}) && a.dim() == 4 && b.dim() == 4 && c.dim() == 4 &&
         a.dtype == b.dtype && a.dtype == c.dtype;
}

}  // namespace

// f32 only: bf16's 3x3 layers run our Winograd kernels in NHWC where the CPU has AVX512-BF16
// and no AMX (winograd.cpp), and activations blocked around them would be reordered there.
// The block is the one oneDNN's direct and Winograd f32 kernels take on the ISA oneDNN runs
// (ONEDNN_MAX_CPU_ISA may hold it below the CPU's): where the block did not match it, its batch
// norm and pooling fell to their reference kernels.
MemoryLayout conv_blocked_layout(DType dtype, int64_t channels) {
  if (dtype != DType::f32) return MemoryLayout::strided;
  const MemoryLayout l = onednn_isa_has(dnnl::cpu_isa::avx512_core) ? MemoryLayout::nChw16c
                         : onednn_isa_has(dnnl::cpu_isa::avx2)        ? MemoryLayout::nChw8c
                                                                      : MemoryLayout::strided;
  return l != MemoryLayout::strided && channels % channel_block(l) == 0 ? l : MemoryLayout::strided;
}

void conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                    const Conv2dParams& p) {
  if (any_widens({&y, &x, &w, bias})) {
    const Widened wy(y, false), wx(x, true), ww(w, true);
    std::optional<Widened> wb;
    if (bias) wb.emplace(*bias, true);
    conv2d_forward(wy.view(), wx.view(), ww.view(), wb ? wb->ptr() : nullptr, p);
    return wy.finish();
  }
  if (winograd_forward(y, x, w, bias, p) || winograd_f32_forward(y, x, w, bias, p)) return;
  if (!conv_ok(y, x, w) || (bias && !dnnl_friendly({bias}))) {
    return reference_forward(y, x, w, bias, p);
  }
  const ConvAlgorithm algo = algorithm_for(x.shape[1]);
  KeyBuilder k("conv2d_forward");
  k.add(x).add(w).add(y).add(bias ? int64_t(bias->dtype) : -1);
  add_params(k, p, algo);
  auto ctx = [&] { return describe("conv2d_forward y x w", {&y, &x, &w}); };
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    auto pd = std::make_shared<FwdPd>(in_own_layout(x, y, [&](const md& xm, const md& ym) {
      return make_fwd_pd(xm, w, bias, ym, p, algo, prop_kind::forward_training);
    }));
    return CachedPrimitive{dnnl::convolution_forward(*pd), pd};
  });
  if (!prim) return reference_forward(y, x, w, bias, p);
  const FwdPd& pd = prim->get<FwdPd>();

  Operand src(x, pd.src_desc(), /*is_input=*/true, "conv2d_forward");
  Operand dst(y, pd.dst_desc(), /*is_input=*/false, "conv2d_forward");
  const WeightOperand weights(w, pd.weights_desc(), "conv2d_forward");
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src.mem()},
      {DNNL_ARG_WEIGHTS, weights.mem()},
      {DNNL_ARG_DST, dst.mem()}};
  std::unique_ptr<Operand> b;
  if (bias) {
    b = std::make_unique<Operand>(*bias, pd.bias_desc(), /*is_input=*/true, "conv2d_forward");
    args[DNNL_ARG_BIAS] = b->mem();
  }
  execute(*prim, args, ctx);
  dst.finish();
}

void conv2d_backward_data(const View& dx, const View& dy, const View& w, const Conv2dParams& p) {
  if (any_widens({&dx, &dy, &w})) {
    const Widened wdx(dx, false), wdy(dy, true), ww(w, true);
    conv2d_backward_data(wdx.view(), wdy.view(), ww.view(), p);
    return wdx.finish();
  }
  if (winograd_backward_data(dx, dy, w, p) || winograd_f32_backward_data(dx, dy, w, p)) return;
  if (!conv_ok(dx, dy, w)) return reference_backward_data(dx, dy, w, p);
  const ConvAlgorithm algo = algorithm_for(dx.shape[1]);
  KeyBuilder k("conv2d_backward_data");
  k.add(dx).add(w).add(dy);
  add_params(k, p, algo);
  auto ctx = [&] { return describe("conv2d_backward_data dx dy w", {&dx, &dy, &w}); };
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    auto pd = std::make_shared<BwdDataPd>(in_own_layout(dy, dx, [&](const md& dym, const md& dxm) {
      const FwdPd hint = make_fwd_pd(dxm, w, nullptr, dym, p, algo, prop_kind::forward_training);
      const Geometry g = geometry(p);
      dnnl::convolution_backward_data::desc d(dnnl_algorithm(algo), dxm, any_layout(w), dym,
                                              g.strides, g.dilates, g.pad_l, g.pad_r);
      return BwdDataPd(d, dnnl_engine(), hint);
    }));
    return CachedPrimitive{dnnl::convolution_backward_data(*pd), pd};
  });
  if (!prim) return reference_backward_data(dx, dy, w, p);
  const BwdDataPd& pd = prim->get<BwdDataPd>();

  Operand diff_dst(dy, pd.diff_dst_desc(), /*is_input=*/true, "conv2d_backward_data");
  Operand diff_src(dx, pd.diff_src_desc(), /*is_input=*/false, "conv2d_backward_data");
  const WeightOperand weights(w, pd.weights_desc(), "conv2d_backward_data");
  execute(*prim,
          {{DNNL_ARG_DIFF_DST, diff_dst.mem()},
           {DNNL_ARG_WEIGHTS, weights.mem()},
           {DNNL_ARG_DIFF_SRC, diff_src.mem()}},
          ctx);
  diff_src.finish();
}

void conv2d_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                             const Conv2dParams& p) {
  if (any_widens({&dw, db, &dy, &x})) {
    const Widened wdw(dw, false), wdy(dy, true), wx(x, true);
    std::optional<Widened> wdb;
    if (db) wdb.emplace(*db, false);
    conv2d_backward_weights(wdw.view(), wdb ? wdb->ptr() : nullptr, wdy.view(), wx.view(), p);
    wdw.finish();
    if (wdb) wdb->finish();
    return;
  }
  if (winograd_backward_weights(dw, db, dy, x, p) || winograd_f32_backward_weights(dw, db, dy, x, p))
    return;
  if (conv_gemm_backward_weights(dw, db, dy, x, p)) return;
  if (!conv_ok(dy, x, dy) || dw.dim() != 4 || !dnnl_friendly({&dw}) ||
      (db && !dnnl_friendly({db}))) {
    return reference_backward_weights(dw, db, dy, x, p);
  }
  const ConvAlgorithm algo = algorithm_for(x.shape[1]);
  KeyBuilder k("conv2d_backward_weights");
  k.add(dw).add(x).add(dy).add(db ? int64_t(db->dtype) : -1);
  add_params(k, p, algo);
  auto ctx = [&] { return describe("conv2d_backward_weights dw dy x", {&dw, &dy, &x}); };
  const CachedPrimitive* prim = lookup(k.str(), ctx, [&] {
    auto pd = std::make_shared<BwdWeightsPd>(in_own_layout(x, dy, [&](const md& xm, const md& dym) {
      const FwdPd hint = make_fwd_pd(xm, dw, db, dym, p, algo, prop_kind::forward_training);
      const Geometry g = geometry(p);
      dnnl::convolution_backward_weights::desc d(dnnl_algorithm(algo), xm, any_layout(dw),
                                                 db ? bias_md(*db) : md(), dym, g.strides,
                                                 g.dilates, g.pad_l, g.pad_r);
      return BwdWeightsPd(d, dnnl_engine(), hint);
    }));
    return CachedPrimitive{dnnl::convolution_backward_weights(*pd), pd};
  });
  if (!prim) return reference_backward_weights(dw, db, dy, x, p);
  const BwdWeightsPd& pd = prim->get<BwdWeightsPd>();

  Operand src(x, pd.src_desc(), /*is_input=*/true, "conv2d_backward_weights");
  Operand diff_dst(dy, pd.diff_dst_desc(), /*is_input=*/true, "conv2d_backward_weights");
  Operand diff_weights(dw, pd.diff_weights_desc(), /*is_input=*/false, "conv2d_backward_weights",
                       Moved::weights);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src.mem()},
                                             {DNNL_ARG_DIFF_DST, diff_dst.mem()},
                                             {DNNL_ARG_DIFF_WEIGHTS, diff_weights.mem()}};
  std::unique_ptr<Operand> diff_bias;
  if (db) {
    diff_bias = std::make_unique<Operand>(*db, pd.diff_bias_desc(), /*is_input=*/false,
                                          "conv2d_backward_weights");
    args[DNNL_ARG_DIFF_BIAS] = diff_bias->mem();
  }
  execute(*prim, args, ctx);
  diff_weights.finish();
  if (diff_bias) diff_bias->finish();
}

}  // namespace ringflow::cpu
