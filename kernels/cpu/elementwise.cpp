// Own OpenMP loops for the hot elementwise paths on f32, bf16 and f16 (copy and fill on any
// dtype): operands laid out as loop.h accepts (same layout, per-channel or scalar broadcast).
// relu and relu_backward are ours, not oneDNN eltwise's, which turns a NaN into 0 (relu)
// and stops the gradient at a NaN, where PyTorch passes both on.
// Anything else calls the reference kernel.
#include <cmath>
#include <cstring>
#include <limits>

#include "ringflow/kernels/cpu/bf16.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/element.h"
#include "ringflow/kernels/cpu/loop.h"
#include "ringflow/kernels/cpu/loop_isa.h"

namespace ringflow::cpu {
namespace {

// Inner loops, specialised on whether each input is unit-stride (true) or broadcast.
template <class E, bool A, class Fn>
inline void inner1(typename E::T* __restrict o, const typename E::T* __restrict a, int64_t n,
                   Fn fn) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = E::store(fn(E::load(a[A ? i : 0])));
}

template <class E, bool A, bool B, class Fn>
inline void inner2(typename E::T* __restrict o, const typename E::T* __restrict a,
                   const typename E::T* __restrict b, int64_t n, Fn fn) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = E::store(fn(E::load(a[A ? i : 0]), E::load(b[B ? i : 0])));
}

template <class E, class Fn>
void run_unary(const LoopPlan& plan, const View& out_v, const View& in_v, Fn fn) {
  using T = typename E::T;
  T* out = out_v.ptr<T>();
  const T* in = in_v.ptr<const T>();
  const bool ua = plan.inner_unit(1);
  parallel_loop(plan, [&](int64_t o, int64_t b, int64_t e) {
    T* po = out + plan.offset(0, o) + b;
    const T* pa = in + plan.offset(1, o) + (ua ? b : 0);
    sized_loop<T>([&] {
      if (ua) inner1<E, true>(po, pa, e - b, fn);
      else inner1<E, false>(po, pa, e - b, fn);
    });
  });
}

template <class E, class Fn>
void run_binary(const LoopPlan& plan, const View& out_v, const View& a_v, const View& b_v,
                Fn fn) {
  using T = typename E::T;
  T* out = out_v.ptr<T>();
  const T* a = a_v.ptr<const T>();
  const T* b_ = b_v.ptr<const T>();
  const bool ua = plan.inner_unit(1), ub = plan.inner_unit(2);
  parallel_loop(plan, [&](int64_t o, int64_t b, int64_t e) {
    T* po = out + plan.offset(0, o) + b;
    const T* pa = a + plan.offset(1, o) + (ua ? b : 0);
    const T* pb = b_ + plan.offset(2, o) + (ub ? b : 0);
    const int64_t n = e - b;
    sized_loop<T>([&] {
      if (ua && ub) inner2<E, true, true>(po, pa, pb, n, fn);
      else if (ua) inner2<E, true, false>(po, pa, pb, n, fn);
      else if (ub) inner2<E, false, true>(po, pa, pb, n, fn);
      else inner2<E, false, false>(po, pa, pb, n, fn);
    });
  });
}

// Same-dtype copy of elements of type T (raw bits), or a conversion between f32 and bf16 or f16.
// fn a lambda, not a function pointer: one indirect call per element would not vectorize.
template <class To, class From, class Fn>
void run_convert(const LoopPlan& plan, To* out, const From* in, Fn fn) {
  const bool ua = plan.inner_unit(1);
  parallel_loop(plan, [&](int64_t o, int64_t b, int64_t e) {
    To* __restrict po = out + plan.offset(0, o) + b;
    const From* __restrict pa = in + plan.offset(1, o) + (ua ? b : 0);
    const int64_t n = e - b;
    if (ua) {
      if constexpr (std::is_same_v<To, From>) {
        std::memcpy(po, pa, n * sizeof(To));
      } else {
        sized_loop<uint16_t>([&] {  // one side of a conversion is 16-bit
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i]);
        });
      }
    } else {
      const To v = fn(pa[0]);
      for (int64_t i = 0; i < n; ++i) po[i] = v;
    }
  });
}

inline float nan_max(float a, float b) { return (a != a || b != b) ? std::numeric_limits<float>::quiet_NaN() : (a > b ? a : b); }
inline float nan_min(float a, float b) { return (a != a || b != b) ? std::numeric_limits<float>::quiet_NaN() : (a < b ? a : b); }

}  // namespace

bool is_dense(const View& v) {
  std::array<int64_t, kLoopMaxDims> st{}, sz{};
  int n = 0;
  if (v.dim() > kLoopMaxDims) return false;
  for (int d = 0; d < v.dim(); ++d) {
    if (v.shape[d] == 0) return false;
    if (v.shape[d] == 1) continue;
    st[n] = v.strides[d];
    sz[n] = v.shape[d];
    ++n;
  }
  // Sort (stride, size) by stride, innermost first; each must step over the previous.
  for (int i = 1; i < n; ++i) {
    for (int j = i; j > 0 && st[j] < st[j - 1]; --j) {
      std::swap(st[j], st[j - 1]);
      std::swap(sz[j], sz[j - 1]);
    }
  }
  int64_t expected = 1;
  for (int i = 0; i < n; ++i) {
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

bool dnnl_friendly(std::initializer_list<const View*> views) {
  for (const View* v : views) {
    if (!dnnl_supports(v->dtype)) return false;
    for (int d = 0; d < v->dim(); ++d) {
      if (v->shape[d] == 0) return false;
      if (v->shape[d] > 1 && v->strides[d] == 0) return false;
    }
  }
  return true;
}

void copy(const View& dst, const View& src) {
  if (dst.layout != src.layout) {  // to or from a blocked layout (Note [blocked operands])
    if (dst.shape != src.shape || !dnnl_friendly({&dst, &src}))
      throw std::invalid_argument("copy between layouts " + describe(memory_layout_name(src.layout), {&src}) +
                                  " -> " + describe(memory_layout_name(dst.layout), {&dst}) +
                                  ": oneDNN reorders only same-shaped f32/bf16 tensors without broadcast");
    dnnl::memory s(md_of(src), dnnl_engine(), src.data), d(md_of(dst), dnnl_engine(), dst.data);
    return reorder(s, d, "copy", Moved::activation);
  }
  LoopPlan plan;
  if (dst.numel() > 0 && make_loop_plan(plan, dst, {&src})) {
    if (dst.dtype == src.dtype) {
      switch (dtype_size(dst.dtype)) {
        case 2: return run_convert(plan, dst.ptr<uint16_t>(), src.ptr<uint16_t>(), [](uint16_t v) { return v; });
        case 4: return run_convert(plan, dst.ptr<uint32_t>(), src.ptr<uint32_t>(), [](uint32_t v) { return v; });
        case 8: return run_convert(plan, dst.ptr<uint64_t>(), src.ptr<uint64_t>(), [](uint64_t v) { return v; });
        default: break;
      }
    } else if (dst.dtype == DType::bf16 && src.dtype == DType::f32) {
      return run_convert(plan, dst.ptr<uint16_t>(), src.ptr<float>(), [](float v) { return to_bf16(v); });
    } else if (dst.dtype == DType::f32 && src.dtype == DType::bf16) {
      return run_convert(plan, dst.ptr<float>(), src.ptr<uint16_t>(), [](uint16_t v) { return from_bf16(v); });
    } else if (dst.dtype == DType::f16 && src.dtype == DType::f32) {  // autocast to f16
      return run_convert(plan, dst.ptr<uint16_t>(), src.ptr<float>(), float_to_half_bits);
    } else if (dst.dtype == DType::f32 && src.dtype == DType::f16) {
      return run_convert(plan, dst.ptr<float>(), src.ptr<uint16_t>(), half_bits_to_float);
    }
  }
  // Relayouts between dense layouts of f32/bf16 (e.g. NCHW <-> NHWC) through oneDNN.
  if (dst.numel() > 0 && dst.shape == src.shape && dst.dim() >= 1 && dst.dim() <= 6 &&
      dnnl_friendly({&dst, &src}) && is_dense(dst)) {
    dnnl::memory s(md_of(src), dnnl_engine(), src.data), d(md_of(dst), dnnl_engine(), dst.data);
    return reorder(s, d, "copy", Moved::activation);
  }
  reference_backend().copy(dst, src);
}

void fill(const View& dst, double value) {
  LoopPlan plan;
  if (dst.numel() > 0 && make_loop_plan(plan, dst, {})) {
    auto fill_as = [&](auto bits) {
      using T = decltype(bits);
      parallel_loop(plan, [&](int64_t o, int64_t b, int64_t e) {
        T* p = static_cast<T*>(dst.data) + plan.offset(0, o);
        for (int64_t i = b; i < e; ++i) p[i] = bits;
      });
    };
    // The value in dst's dtype, as raw bits.
    uint64_t raw = 0;
    visit_dtype(dst.dtype, [&](auto t) {
      using T = decltype(t);
      const T v = static_cast<T>(value);
      std::memcpy(&raw, &v, sizeof(T));
    });
    switch (dtype_size(dst.dtype)) {
      case 2: return fill_as(static_cast<uint16_t>(raw));
      case 4: return fill_as(static_cast<uint32_t>(raw));
      case 8: return fill_as(static_cast<uint64_t>(raw));
      default: break;
    }
  }
  reference_backend().fill(dst, value);
}

void unary(UnaryOp op, const View& out, const View& in) {
  LoopPlan plan;
  const bool done = out.dtype == in.dtype && out.numel() > 0 &&
                    make_loop_plan(plan, out, {&in}) && with_elem(out.dtype, [&](auto e) {
    using E = decltype(e);
    auto run = [&](auto fn) { run_unary<E>(plan, out, in, fn); return true; };
    switch (op) {
      case UnaryOp::neg: return run([](float x) { return -x; });
      case UnaryOp::exp: return run([](float x) { return std::exp(x); });
      case UnaryOp::log: return run([](float x) { return std::log(x); });
      case UnaryOp::sqrt: return run([](float x) { return std::sqrt(x); });
      case UnaryOp::relu: return run([](float x) { return x > 0.f ? x : (x != x ? x : 0.f); });
      case UnaryOp::abs: return run([](float x) { return std::fabs(x); });
      case UnaryOp::sigmoid: return run([](float x) { return 1.f / (1.f + std::exp(-x)); });
      case UnaryOp::tanh: return run([](float x) { return std::tanh(x); });
    }
    return false;
  });
  if (!done) reference_backend().unary(op, out, in);
}

void binary(BinaryOp op, const View& out, const View& a, const View& b) {
  LoopPlan plan;
  const bool done = out.dtype == a.dtype && out.dtype == b.dtype && out.numel() > 0 &&
                    make_loop_plan(plan, out, {&a, &b}) && with_elem(out.dtype, [&](auto e) {
    using E = decltype(e);
    auto run = [&](auto fn) { run_binary<E>(plan, out, a, b, fn); return true; };
    switch (op) {
      case BinaryOp::add: return run([](float x, float y) { return x + y; });
      case BinaryOp::sub: return run([](float x, float y) { return x - y; });
      case BinaryOp::mul: return run([](float x, float y) { return x * y; });
      case BinaryOp::div: return run([](float x, float y) { return x / y; });
      case BinaryOp::pow: return run([](float x, float y) { return std::pow(x, y); });
      case BinaryOp::maximum: return run(nan_max);
      case BinaryOp::minimum: return run(nan_min);
      case BinaryOp::eq: return run([](float x, float y) { return x == y ? 1.f : 0.f; });
      case BinaryOp::ne: return run([](float x, float y) { return x != y ? 1.f : 0.f; });
      case BinaryOp::lt: return run([](float x, float y) { return x < y ? 1.f : 0.f; });
      case BinaryOp::le: return run([](float x, float y) { return x <= y ? 1.f : 0.f; });
      case BinaryOp::gt: return run([](float x, float y) { return x > y ? 1.f : 0.f; });
      case BinaryOp::ge: return run([](float x, float y) { return x >= y ? 1.f : 0.f; });
      case BinaryOp::relu_backward: return run([](float g, float x) { return x <= 0.f ? 0.f : g; });
    }
    return false;
  });
  if (!done) reference_backend().binary(op, out, a, b);
}

void where(const View& out, const View& cond, const View& a, const View& b) {
  LoopPlan plan;
  if (out.dtype != DType::f32 || cond.dtype != DType::f32 || a.dtype != DType::f32 ||
      b.dtype != DType::f32 || out.numel() == 0 || !make_loop_plan(plan, out, {&cond, &a, &b})) {
    return reference_backend().where(out, cond, a, b);
  }
  parallel_loop(plan, [&](int64_t o, int64_t lo, int64_t hi) {
    float* po = out.ptr<float>() + plan.offset(0, o);
    const float* pc = cond.ptr<float>() + plan.offset(1, o);
    const float* pa = a.ptr<float>() + plan.offset(2, o);
    const float* pb = b.ptr<float>() + plan.offset(3, o);
    const int64_t sc = plan.stride[1][plan.ndim - 1], sa = plan.stride[2][plan.ndim - 1],
                  sb = plan.stride[3][plan.ndim - 1];
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) po[i] = pc[i * sc] != 0.f ? pa[i * sa] : pb[i * sb];
  });
}

}  // namespace ringflow::cpu
