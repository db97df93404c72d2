// Elementwise SIMT kernels: copy (with dtype conversion), fill, unary, binary, where; one
// thread per element over an Indexer (any strides, 0 broadcasts), or per 16-byte pack where
// every operand is one dense run (Note [Dense runs]). Arithmetic runs in the
// accumulation type (float for f32/f16/bf16, double for f64, int64 for integers), rounded
// once on store, with the reference backend's semantics (NaN handling, integer division).
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/indexer.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

// Conversion as the reference does it: integer to integer through int64; any f64 or integer
// side through double; among f32/f16/bf16 through float, which holds them all exactly.
template <class To, class From>
RF_HD inline To convert(From x) {
  if constexpr (std::is_same_v<To, From>) return x;
  else if constexpr (!is_float_v<acc_t<To>> && !is_float_v<acc_t<From>>)
    return store<To>(static_cast<int64_t>(load(x)));
  else if constexpr (std::is_same_v<acc_t<To>, float> && std::is_same_v<acc_t<From>, float>)
    return store<To>(load(x));
  else return store<To>(static_cast<double>(load(x)));
}

template <class To, class From>
struct CopyBody {
  To* dst;
  const From* src;
  Indexer<2> ix;
  RF_HD void operator()(int64_t i) const {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[0]] = convert<To>(src[off[1]]);
  }
};

template <class T>
struct FillBody {
  T* dst;
  T value;
  Indexer<1> ix;
  RF_HD void operator()(int64_t i) const {
    int64_t off[1];
    ix.offsets(i, off);
    dst[off[0]] = value;
  }
};

template <class A>
RF_HD inline A unary_op(UnaryOp op, A x) {
  if constexpr (is_float_v<A>) {
    switch (op) {
      case UnaryOp::neg: return -x;
      case UnaryOp::exp: return simt::exp(x);
      case UnaryOp::log: return simt::log(x);
      case UnaryOp::sqrt: return simt::sqrt(x);
      case UnaryOp::relu: return isnan(x) ? x : (x > A(0) ? x : A(0));  // NaN propagates
      case UnaryOp::abs: return simt::fabs(x);
      case UnaryOp::sigmoid: return A(1) / (A(1) + simt::exp(-x));
      case UnaryOp::tanh: return simt::tanh(x);
    }
    return x;
  } else {
    switch (op) {
      case UnaryOp::neg: return -x;
      case UnaryOp::abs: return x < 0 ? -x : x;
      default: return x > 0 ? x : 0;  // relu; the launcher allows no other op on integers
    }
  }
}

template <class T>
struct UnaryBody {
  T* out;
  const T* in;
  UnaryOp op;
  Indexer<2> ix;
  RF_HD void operator()(int64_t i) const {
    int64_t off[2];
    ix.offsets(i, off);
    out[off[0]] = store<T>(unary_op(op, load(in[off[1]])));
  }
};

// A kernel cannot throw: integer division by zero gives 0 and a negative integer power 1
// (the reference backend throws).
template <class A>
RF_HD inline A binary_op(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div:
      if constexpr (is_float_v<A>) return a / b;
      else return b == 0 ? A(0) : a / b;  // truncates toward zero
    case BinaryOp::pow:
      if constexpr (is_float_v<A>) {
        return simt::pow(a, b);
      } else {
        A r = 1;
        for (A i = 0; i < b; ++i) r *= a;
        return r;
      }
    case BinaryOp::maximum:
      if (isnan(a) || isnan(b)) return quiet_nan<A>();  // torch.maximum propagates NaN
      return a > b ? a : b;
    case BinaryOp::minimum:
      if (isnan(a) || isnan(b)) return quiet_nan<A>();
      return a < b ? a : b;
    case BinaryOp::eq: return a == b ? A(1) : A(0);
    case BinaryOp::ne: return a != b ? A(1) : A(0);
    case BinaryOp::lt: return a < b ? A(1) : A(0);
    case BinaryOp::le: return a <= b ? A(1) : A(0);
    case BinaryOp::gt: return a > b ? A(1) : A(0);
    case BinaryOp::ge: return a >= b ? A(1) : A(0);
    case BinaryOp::relu_backward: return b <= A(0) ? A(0) : a;
  }
  return a;
}

template <class T>
struct BinaryBody {
  T* out;
  const T* a;
  const T* b;
  BinaryOp op;
  Indexer<3> ix;
  RF_HD void operator()(int64_t i) const {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = store<T>(binary_op(op, load(a[off[1]]), load(b[off[2]])));
  }
};

template <class T, class C>
struct WhereBody {
  T* out;
  const C* cond;
  const T* a;
  const T* b;
  Indexer<4> ix;
  RF_HD void operator()(int64_t i) const {
    int64_t off[4];
    ix.offsets(i, off);
    out[off[0]] = load(cond[off[1]]) != 0 ? a[off[2]] : b[off[3]];
  }
};

// Note [Dense runs]
// Where the Indexer merged every operand into one run of stride 1 (contiguous operands of one
// layout, the usual case: a residual gradient's sum, a cast), a thread moves 16-byte packs.
// One 4-byte (or 2-byte) access per thread leaves too few bytes in flight to fill the GPU's
// memory pipe: ResNet-50's f32 sums of two (256, 256, 56, 56) gradients ran at ~60% of the
// H200's bandwidth (docs/cuda.md). The packs' elements get the per-element bodies' arithmetic.
template <int N>
bool dense_run(const Indexer<N>& ix) {
  if (ix.ndim != 1) return false;
  for (int k = 0; k < N; ++k)
    if (ix.strides[k][0] != 1) return false;
  return true;
}

template <class To, class From, int V>
struct CopyPackBody {
  Pack<To, V>* dst;
  const Pack<From, V>* src;
  RF_HD void operator()(int64_t j) const {
    const Pack<From, V> in = src[j];
    Pack<To, V> out;
    for (int e = 0; e < V; ++e) out.e[e] = convert<To>(in.e[e]);
    dst[j] = out;
  }
};

template <class T, int V>
struct FillPackBody {
  Pack<T, V>* dst;
  T value;
  RF_HD void operator()(int64_t j) const {
    Pack<T, V> out;
    for (int e = 0; e < V; ++e) out.e[e] = value;
    dst[j] = out;
  }
};

template <class T, int V>
struct UnaryPackBody {
  Pack<T, V>* out;
  const Pack<T, V>* in;
  UnaryOp op;
  RF_HD void operator()(int64_t j) const {
    const Pack<T, V> x = in[j];
    Pack<T, V> r;
    for (int e = 0; e < V; ++e) r.e[e] = store<T>(unary_op(op, load(x.e[e])));
    out[j] = r;
  }
};

template <class T, int V>
struct BinaryPackBody {
  Pack<T, V>* out;
  const Pack<T, V>* a;
  const Pack<T, V>* b;
  BinaryOp op;
  RF_HD void operator()(int64_t j) const {
    const Pack<T, V> x = a[j], y = b[j];
    Pack<T, V> r;
    for (int e = 0; e < V; ++e) r.e[e] = store<T>(binary_op(op, load(x.e[e]), load(y.e[e])));
    out[j] = r;
  }
};

template <class Exec>
void copy(const Exec& exec, const View& dst, const View& src) {
  check_same_shape(dst, src, "copy");
  if (dst.numel() == 0) return;
  const Indexer<2> ix = make_indexer<2>({&dst, &src}, "copy");
  visit_dtype(dst.dtype, [&](auto to) {
    visit_dtype(src.dtype, [&](auto from) {
      using To = decltype(to);
      using From = decltype(from);
      // Packs of the wider type's 16 bytes; the narrower side's are smaller and as aligned.
      using Wide = std::conditional_t<(sizeof(To) > sizeof(From)), To, From>;
      constexpr int V = kPack<Wide>;
      if (dense_run(ix) && packs_fit<Wide>(ix.numel, {dst.data, src.data}))
        return exec.elementwise(ix.numel / V, CopyPackBody<To, From, V>{static_cast<Pack<To, V>*>(dst.data),
                                                                        static_cast<const Pack<From, V>*>(src.data)});
      exec.elementwise(ix.numel, CopyBody<To, From>{dst.ptr<To>(), src.ptr<const From>(), ix});
    });
  });
}

template <class Exec>
void fill(const Exec& exec, const View& dst, double value) {
  if (dst.numel() == 0) return;
  const Indexer<1> ix = make_indexer<1>({&dst}, "fill");
  visit_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kPack<T>;
    if (dense_run(ix) && packs_fit<T>(ix.numel, {dst.data}))
      return exec.elementwise(ix.numel / V, FillPackBody<T, V>{static_cast<Pack<T, V>*>(dst.data), store<T>(value)});
    exec.elementwise(ix.numel, FillBody<T>{dst.ptr<T>(), store<T>(value), ix});
  });
}

template <class Exec>
void unary(const Exec& exec, UnaryOp op, const View& out, const View& in) {
  check_same_shape(out, in, "unary");
  check_same_dtype(out, in, "unary");
  check(is_floating(out.dtype) || op == UnaryOp::neg || op == UnaryOp::abs ||
            op == UnaryOp::relu,
        "unary", std::string(unary_op_name(op)) + " needs a floating output, got " +
                     dtype_name(out.dtype));
  if (out.numel() == 0) return;
  const Indexer<2> ix = make_indexer<2>({&out, &in}, "unary");
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kPack<T>;
    using P = Pack<T, V>;
    if (dense_run(ix) && packs_fit<T>(ix.numel, {out.data, in.data}))
      return exec.elementwise(ix.numel / V, UnaryPackBody<T, V>{static_cast<P*>(out.data),
                                                                static_cast<const P*>(in.data), op});
    exec.elementwise(ix.numel, UnaryBody<T>{out.ptr<T>(), in.ptr<const T>(), op, ix});
  });
}

template <class Exec>
void binary(const Exec& exec, BinaryOp op, const View& out, const View& a, const View& b) {
  check_same_shape(out, a, "binary");
  check_same_shape(out, b, "binary");
  check_same_dtype(out, a, "binary");
  check_same_dtype(out, b, "binary");
  if (out.numel() == 0) return;
  const Indexer<3> ix = make_indexer<3>({&out, &a, &b}, "binary");
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kPack<T>;
    using P = Pack<T, V>;
    if (dense_run(ix) && packs_fit<T>(ix.numel, {out.data, a.data, b.data}))
      return exec.elementwise(ix.numel / V, BinaryPackBody<T, V>{static_cast<P*>(out.data), static_cast<const P*>(a.data),
                                                                 static_cast<const P*>(b.data), op});
    exec.elementwise(ix.numel, BinaryBody<T>{out.ptr<T>(), a.ptr<const T>(), b.ptr<const T>(), op, ix});
  });
}

template <class Exec>
void where(const Exec& exec, const View& out, const View& cond, const View& a, const View& b) {
  check_same_shape(out, cond, "where");
  check_same_shape(out, a, "where");
  check_same_shape(out, b, "where");
  check_same_dtype(out, a, "where");
  check_same_dtype(out, b, "where");
  if (out.numel() == 0) return;
  const Indexer<4> ix = make_indexer<4>({&out, &cond, &a, &b}, "where");
  visit_dtype(out.dtype, [&](auto tag) {
    visit_dtype(cond.dtype, [&](auto ctag) {
      using T = decltype(tag);
      using C = decltype(ctag);
      exec.elementwise(ix.numel, WhereBody<T, C>{out.ptr<T>(), cond.ptr<const C>(),
                                                 a.ptr<const T>(), b.ptr<const T>(), ix});
    });
  });
}

// The entries of a kernel table that these kernels fill, run by Exec.
template <class Exec>
void set_elementwise_kernels(Backend& b) {
  b.copy = [](const View& dst, const View& src) { copy(Exec{}, dst, src); };
  b.fill = [](const View& dst, double value) { fill(Exec{}, dst, value); };
  b.unary = [](UnaryOp op, const View& out, const View& in) { unary(Exec{}, op, out, in); };
  b.binary = [](BinaryOp op, const View& out, const View& a, const View& x) {
    binary(Exec{}, op, out, a, x);
  };
  b.where = [](const View& out, const View& cond, const View& a, const View& x) {
    where(Exec{}, out, cond, a, x);
  };
}

}  // namespace ringflow::simt
