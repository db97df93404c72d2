// Memory formats (framework/memory_format.h): the names, where a convolution lays out its
// output under each format, that the ops after it keep that layout through a
// conv-bn-relu-pool-add chain and its backward, that parameters and their gradients stay in
// PyTorch's layout, that every format computes the numbers of the reference kernels, and that
// auto keeps a chain in oneDNN's blocked layout without reorders on the CPU.
#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/dnnl_context.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;
using ringflow::testing::all_close;
using ringflow::testing::seeded;

namespace {

// NHWC in memory and not NCHW (C, H, W > 1, where the two differ).
bool nhwc(const Tensor& t) { return t.is_channels_last() && !t.is_contiguous(); }

struct Chain {
  Tensor x, w1, b1, gamma, beta, w2, out;
};

// conv -> batch norm + relu -> max pool -> conv -> + pooled -> relu, then backward of a
// weighted sum; `layouts` gets whether each activation was channels-last.
Chain run_chain(MemoryFormat format, DType dtype, std::vector<bool>* layouts) {
  const MemoryFormatGuard guard(format);
  Chain c;
  c.x = seeded({2, 3, 8, 8}, 1, dtype).requires_grad_();
  c.w1 = seeded({6, 3, 3, 3}, 2, dtype).requires_grad_();
  c.b1 = seeded({6}, 3, dtype).requires_grad_();
  c.gamma = seeded({6}, 4, dtype).requires_grad_();
  c.beta = seeded({6}, 5, dtype).requires_grad_();
  c.w2 = seeded({6, 6, 1, 1}, 6, dtype).requires_grad_();
  Tensor rm = zeros({6}, dtype), rv = ones({6}, dtype);
  Tensor h1 = conv2d(c.x, c.w1, c.b1, conv2d_params({1, 1}, {1, 1}));
  Tensor h2 = batch_norm_relu(h1, rm, rv, c.gamma, c.beta, /*training=*/true, 0.1, 1e-5);
  Tensor h3 = max_pool2d(h2, pool2d_params({2, 2}));
  Tensor h4 = conv2d(h3, c.w2, Tensor(), conv2d_params({1, 1}, {0, 0}));
  c.out = relu(add(h4, h3));
  for (const Tensor* t : {&h1, &h2, &h3, &h4, &c.out}) layouts->push_back(nhwc(*t));
  sum(mul(c.out, seeded(c.out.shape(), 7, dtype))).backward();
  return c;
}

}  // namespace

TEST_CASE("memory formats by name") {
  for (const std::string& name : memory_format_names())
    CHECK(memory_format_name(memory_format_from_name(name)) == name);
  CHECK(memory_format_names() == std::vector<std::string>{"auto", "nchw", "nhwc"});
  CHECK_THROWS_WITH_AS(memory_format_from_name("channels_last"),
                       doctest::Contains("'channels_last' is none of auto, nchw, nhwc"), std::invalid_argument);
  CHECK(memory_format() == MemoryFormat::automatic);
  {
    const MemoryFormatGuard guard(MemoryFormat::nchw);
    CHECK(memory_format() == MemoryFormat::nchw);
  }
  CHECK(memory_format() == MemoryFormat::automatic);
}

TEST_CASE("where a convolution's output is channels-last") {
  const Device cpu = Device::cpu(), cuda = Device::cuda(0);
  for (const Device d : {cpu, cuda})
    for (const DType dt : {DType::f32, DType::bf16, DType::f16})
      for (const bool in_cl : {false, true})
        for (const bool prefers : {false, true}) {
          CHECK_FALSE(conv_output_channels_last(MemoryFormat::nchw, d, dt, in_cl, prefers, true));
          CHECK(conv_output_channels_last(MemoryFormat::nhwc, d, dt, in_cl, prefers, false));
          // auto: a channels-last input or a device that prefers it keeps it
          if (in_cl || prefers) CHECK(conv_output_channels_last(MemoryFormat::automatic, d, dt, in_cl, prefers, false));
        }
  // auto, an NCHW input on a device without a preference: channels-last only on CUDA's tensor
  // cores, for 16-bit and TF32 (Note [16-bit activations channels-last on CUDA])
  for (const bool tf32 : {false, true}) {
    CHECK_FALSE(conv_output_channels_last(MemoryFormat::automatic, cpu, DType::bf16, false, false, tf32));
    CHECK_FALSE(conv_output_channels_last(MemoryFormat::automatic, cpu, DType::f32, false, false, tf32));
    CHECK(conv_output_channels_last(MemoryFormat::automatic, cuda, DType::bf16, false, false, tf32));
    CHECK(conv_output_channels_last(MemoryFormat::automatic, cuda, DType::f16, false, false, tf32));
    CHECK(conv_output_channels_last(MemoryFormat::automatic, cuda, DType::f32, false, false, tf32) == tf32);
    CHECK_FALSE(conv_output_channels_last(MemoryFormat::automatic, cuda, DType::f64, false, false, tf32));
  }
}

TEST_CASE("a conv-bn-relu-pool-add chain keeps the format's layout, forward and backward") {
  // The reference kernels in f64: the truth, and NCHW whatever the format (no preference).
  std::vector<bool> ref_layouts;
  Chain ref;
  {
    ReferenceKernelsGuard reference;
    ref = run_chain(MemoryFormat::nchw, DType::f64, &ref_layouts);
  }
  for (const MemoryFormat format : {MemoryFormat::automatic, MemoryFormat::nchw, MemoryFormat::nhwc}) {
    CAPTURE(memory_format_name(format));
    std::vector<bool> layouts;
    const Chain c = run_chain(format, DType::f32, &layouts);  // the cpu (oneDNN) kernels
    // auto on the cpu: oneDNN's preference, channels-last (6 channels take no blocked layout)
    const bool want = format != MemoryFormat::nchw;
    for (size_t i = 0; i < layouts.size(); ++i) {
      CAPTURE(i);
      CHECK(layouts[i] == want);
    }
    CHECK(nhwc(c.x.grad()) == nhwc(c.x));  // an input's gradient in the input's layout
    for (const Tensor* p : {&c.w1, &c.w2}) CHECK(p->grad().is_contiguous());  // PyTorch's
    CHECK(all_close(c.out, ref.out, 1e-5, 1e-5, "out"));
    CHECK(all_close(c.x.grad(), ref.x.grad(), 1e-4, 1e-5, "x.grad"));
    CHECK(all_close(c.w1.grad(), ref.w1.grad(), 1e-4, 1e-4, "w1.grad"));
    CHECK(all_close(c.b1.grad(), ref.b1.grad(), 1e-4, 1e-4, "b1.grad"));
    CHECK(all_close(c.gamma.grad(), ref.gamma.grad(), 1e-4, 1e-4, "gamma.grad"));
    CHECK(all_close(c.w2.grad(), ref.w2.grad(), 1e-4, 1e-4, "w2.grad"));
  }
}

TEST_CASE("to(dtype, channels_last): one copy in the asked layout, the gradient in the source's") {
  const Tensor w = seeded({4, 3, 2, 2}, 8, DType::f32).requires_grad_();
  const Tensor cl = w.to(DType::bf16, /*channels_last=*/true);
  CHECK(cl.dtype() == DType::bf16);
  CHECK(nhwc(cl));
  CHECK(all_close(cl, w, 1e-2, 1e-2, "cast"));
  CHECK(w.to(DType::f32, /*channels_last=*/false).impl() == w.impl());  // already so: itself
  sum(mul(cl, seeded(cl.shape(), 9, DType::bf16))).backward();
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(w.grad().is_contiguous());
  CHECK(all_close(w.grad(), seeded(w.shape(), 9, DType::bf16).to(DType::f32), 0, 0, "grad"));
}

namespace {

struct BlockedChain {
  Tensor w0, g0, b0, w1, g1, b1, h0, h1, out;
  std::vector<MemoryLayout> layouts;  // of h0, h1 and out after forward
  size_t activation_reorders = 0;      // oneDNN reorders of activations in forward + backward
};

// A ResNet stem and block on 16 channels: conv -> bn -> relu -> conv -> bn -> + h0 -> relu ->
// max pool, then backward of a weighted sum; the activation reorders counted across both.
BlockedChain run_blocked_chain(MemoryFormat format, DType dtype) {
  const MemoryFormatGuard guard(format);
  BlockedChain c;
  const Tensor x = seeded({2, 3, 8, 8}, 11, dtype);  // an image: no gradient
  c.w0 = seeded({16, 3, 3, 3}, 12, dtype).requires_grad_();
  c.w1 = seeded({16, 16, 3, 3}, 13, dtype).requires_grad_();
  c.g0 = seeded({16}, 14, dtype).requires_grad_();
  c.b0 = seeded({16}, 15, dtype).requires_grad_();
  c.g1 = seeded({16}, 16, dtype).requires_grad_();
  c.b1 = seeded({16}, 17, dtype).requires_grad_();
  Tensor rm = zeros({16}, dtype), rv = ones({16}, dtype);
  const Conv2dParams same = conv2d_params({1, 1}, {1, 1});
  const size_t before = cpu::dnnl_cache_stats().activation_reorders;
  c.h0 = relu(batch_norm(conv2d(x, c.w0, Tensor(), same), rm, rv, c.g0, c.b0, /*training=*/true, 0.1, 1e-5));
  Tensor h = batch_norm(conv2d(c.h0, c.w1, Tensor(), same), rm, rv, c.g1, c.b1, /*training=*/true, 0.1, 1e-5);
  c.h1 = relu(add(h, c.h0));
  c.out = max_pool2d(c.h1, pool2d_params({2, 2}));
  c.layouts = {c.h0.layout(), c.h1.layout(), c.out.layout()};
  sum(mul(c.out, seeded(c.out.shape(), 18, dtype))).backward();
  c.activation_reorders = cpu::dnnl_cache_stats().activation_reorders - before;
  return c;
}

}  // namespace

TEST_CASE("auto keeps a conv-bn-relu-add-pool chain in oneDNN's blocked layout: no activation reorders") {
  const MemoryLayout blocked = cpu_backend().blocked_layout(DType::f32, 16);
  if (blocked == MemoryLayout::strided) {
    MESSAGE("skipped: this CPU's convolutions have no blocked f32 layout (no AVX2)");
    return;
  }
  BlockedChain ref;
  {
    ReferenceKernelsGuard reference;  // f64 loops: the truth
    ref = run_blocked_chain(MemoryFormat::nchw, DType::f64);
  }
  const BlockedChain plain = run_blocked_chain(MemoryFormat::nchw, DType::f32);
  run_blocked_chain(MemoryFormat::automatic, DType::f32);  // builds the primitives once
  const BlockedChain b = run_blocked_chain(MemoryFormat::automatic, DType::f32);
  for (const MemoryLayout l : b.layouts) CHECK(l == blocked);
  for (const MemoryLayout l : plain.layouts) CHECK(l == MemoryLayout::strided);
  // Only at the chain's ends: the weighted sum reads the pooled output (forward) and hands its
  // gradient back strided (backward). Without the blocked layout every convolution reorders
  // its activations in and out, forward and backward.
  CHECK(b.activation_reorders == 2);
  CHECK(plain.activation_reorders >= 8);
  // The same numbers as nchw's (the same convolution primitives; batch norm and pooling in
  // another layout sum in another order) and as the reference's.
  CHECK(all_close(b.out, plain.out, 1e-6, 1e-6, "out"));
  CHECK(all_close(b.out, ref.out, 1e-5, 1e-5, "out vs reference"));
  for (const auto& [name, get] : std::vector<std::pair<const char*, Tensor BlockedChain::*>>{
           {"w0", &BlockedChain::w0}, {"w1", &BlockedChain::w1}, {"g0", &BlockedChain::g0},
           {"b0", &BlockedChain::b0}, {"g1", &BlockedChain::g1}, {"b1", &BlockedChain::b1}}) {
    CAPTURE(name);
    const Tensor& grad = (b.*get).grad();
    CHECK(grad.is_contiguous());  // parameters' gradients in PyTorch's layout
    CHECK(all_close(grad, (plain.*get).grad(), 1e-5, 1e-5, name));
    CHECK(all_close(grad, (ref.*get).grad(), 1e-4, 1e-4, name));
  }
  // Anything that reads elements sees the values, never the blocked memory as strided: a view
  // (flatten, as before a classifier), a slice, and the tensor itself (which converts in place).
  // Blocked memory read as strided would be off by O(1). Through our f32 Winograd
  // convolutions (AVX2) the two layouts' batch norms, whose sums round differently, leave h1
  // ~1e-6 apart.
  const double tol = cpu::winograd_f32_runs_here() ? 1e-5 : 1e-6;
  CHECK(b.h1.layout() == blocked);
  CHECK(all_close(b.h1.flatten(1), plain.h1.flatten(1), tol, tol, "flatten"));
  CHECK(b.h1.layout() == MemoryLayout::strided);
  CHECK(all_close(b.h0.slice(1, 3, 5), plain.h0.slice(1, 3, 5), tol, tol, "slice"));
  CHECK(b.h0.layout() == MemoryLayout::strided);  // the slice converted it
}
