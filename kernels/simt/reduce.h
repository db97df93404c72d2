// Reductions (sum, mean, max, min, argmax) over the dims where out has size 1 and in does
// not: one block per output element, its threads folding the reduced elements (block
// reduction, simt.h), thread 0 storing; sums over the rows of a dense (M, C) matrix (a bias
// gradient over channels-last dy) read along the rows instead (Note [Column sums]). Sums
// accumulate in float (double for f64, int64 for integers); max/min propagate NaN; argmax
// takes the first maximum, or the first NaN.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/columns.h"
#include "ringflow/kernels/simt/indexer.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

template <class A>
struct ArgMax {
  A value;
  int64_t index;  // INT64_MAX: no element yet, so that any element wins a tie with it
};

template <class A>
RF_HD inline ArgMax<A> better(const ArgMax<A>& x, const ArgMax<A>& y) {
  const bool xn = isnan(x.value), yn = isnan(y.value);
  if (xn != yn) return xn ? x : y;
  if (!xn && x.value != y.value) return x.value > y.value ? x : y;
  return x.index <= y.index ? x : y;
}

template <class T, class O>
struct ReduceBody {
  O* out;
  const T* in;
  ReduceOp op;
  Indexer<2> rows;     // row -> (out offset, in offset of the row's first element)
  Indexer<1> reduced;  // position among the reduced elements -> in offset from there
  int64_t count;       // reduced elements per row

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t row) const {
    using A = acc_t<T>;
    int64_t base[2];
    rows.offsets(row, base);
    const auto at = [&](int64_t k) {
      int64_t off[1];
      reduced.offsets(k, off);
      return load(in[base[1] + off[0]]);
    };
    O result;
    if (op == ReduceOp::argmax) {
      const ArgMax<A> best = block.reduce(
          count, ArgMax<A>{lowest<A>(), INT64_MAX},
          [&](int64_t k) { return ArgMax<A>{at(k), k}; },
          [](const ArgMax<A>& x, const ArgMax<A>& y) { return better(x, y); });
      result = store<O>(best.index);
    } else if (op == ReduceOp::sum || op == ReduceOp::mean) {
      A s = block.reduce(count, A(0), at, [](A x, A y) { return x + y; });
      if constexpr (is_float_v<A>)
        if (op == ReduceOp::mean) s = s / static_cast<A>(count);  // 0/0 = NaN, as PyTorch
      result = store<O>(s);
    } else {
      const bool max = op == ReduceOp::max;
      result = store<O>(block.reduce(count, max ? lowest<A>() : highest<A>(), at,
                                     [max](A x, A y) {
                                       if (isnan(x)) return x;
                                       if (isnan(y)) return y;
                                       return (max ? x > y : x < y) ? x : y;
                                     }));
    }
    block.for_each(1, [&](int64_t) { out[base[0]] = result; });
  }
};

// Note [Column sums]
// One block per output element reads a channels-last (N, C, H, W) tensor's channel with a
// stride of C. On an H100 (2026-11-27) cuDNN's bias gradient of such a dy, (256, 64, 32, 32)
// f32, took ~1 ms of the layer's 1.13 ms backward-weights (its filter gradient 0.12), where
// reading dy takes ~25 us; with the sum below VGG-11's TF32 step went from 5.7 to 3.8 ms
// (docs/cuda.md). So where in is a dense (M, C) matrix whose M rows are
// reduced and whose C columns are kept, a first launch gives each thread one column of a chunk
// of rows (columns.h) and a second one block per column merging the chunks' partial sums.

// The (M, C) shape of a column sum of in over the dims out has as 1: the one kept dim of size
// > 1 is in's fastest (stride 1), the reduced dims are dense around it. None where not.
struct ColumnShape {
  int64_t M = 0, C = 0;
  int kept = -1;  // the dim of C
};

inline std::optional<ColumnShape> column_shape(const View& out, const View& in) {
  ColumnShape cs;
  std::vector<int> reduced;
  for (int d = 0; d < in.dim(); ++d) {
    if (in.shape[d] == 1) continue;
    if (out.shape[d] != 1) {
      if (cs.kept >= 0 || in.strides[d] != 1) return std::nullopt;
      cs.kept = d;
    } else {
      reduced.push_back(d);
    }
  }
  if (cs.kept < 0 || reduced.empty()) return std::nullopt;
  cs.C = in.shape[cs.kept];
  // Dense: the reduced dims' strides, smallest first, are C, then each the product before.
  std::sort(reduced.begin(), reduced.end(), [&](int a, int b) { return in.strides[a] < in.strides[b]; });
  int64_t next = cs.C;
  for (int d : reduced) {
    if (in.strides[d] != next) return std::nullopt;
    next *= in.shape[d];
  }
  cs.M = next / cs.C;
  return cs;
}

// Phase 1: thread (p, g) -> the sums of columns g * V .. g * V + V - 1 over chunk p's rows,
// read as one pack per row.
template <class T, int V>
struct ChunkColumnSumBody {
  const T* in;
  ChannelChunks cc;
  acc_t<T>* partial;  // (chunks, C)
  RF_HD void operator()(int64_t i) const {
    using A = acc_t<T>;
    using P = Pack<T, V>;
    const int64_t groups = cc.C / V, g = i % groups, p = i / groups;
    A s[V];
    for (int e = 0; e < V; ++e) s[e] = 0;
    const P* col = reinterpret_cast<const P*>(in + p * cc.chunk * cc.C) + g;
    for_rows(col, groups, cc.rows_in(p), [&](int64_t, const P& v) {
      for (int e = 0; e < V; ++e) s[e] = s[e] + load(v.e[e]);
    });
    for (int e = 0; e < V; ++e) partial[p * cc.C + g * V + e] = s[e];
  }
};

// Phase 2: block per column -> its sum (or mean) into out.
template <class T>
struct MergeColumnSumBody {
  T* out;
  int64_t out_stride;
  ChannelChunks cc;
  const acc_t<T>* partial;
  bool mean;
  template <class Block>
  RF_HD void operator()(const Block& block, int64_t c) const {
    using A = acc_t<T>;
    A s = block.reduce(cc.chunks, A(0), [&](int64_t p) { return partial[p * cc.C + c]; },
                       [](A x, A y) { return x + y; });
    if constexpr (is_float_v<A>)
      if (mean) s = s / static_cast<A>(cc.M);
    block.for_each(1, [&](int64_t) { out[c * out_stride] = store<T>(s); });
  }
};

template <class Exec>
void column_sum(const Exec& exec, const View& out, const View& in, const ColumnShape& cs, bool mean) {
  visit_dtype(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const ChannelChunks cc = channel_chunks(cs.M, cs.C);
    Scratch<Exec, A> scratch;
    A* partial = scratch.take(cc.chunks * cs.C);
    with_pack<T>(cs.C, {in.data}, [&](auto pack) {
      constexpr int V = decltype(pack)::value;
      exec.elementwise(cc.chunks * cs.C / V, ChunkColumnSumBody<T, V>{in.ptr<const T>(), cc, partial});
    });
    exec.rows(cs.C, MergeColumnSumBody<T>{out.ptr<T>(), out.strides[cs.kept], cc, partial, mean});
  });
}

template <class Exec>
void reduce(const Exec& exec, ReduceOp op, const View& out, const View& in) {
  const char* name = "reduce";
  check(out.dim() == in.dim(), name,
        "out " + shape_str(out.shape) + " must have in's rank " + shape_str(in.shape));
  View kept = in, reduced = in;  // in's elements split into rows and positions in a row
  int64_t count = 1, n_reduced = 0;
  for (int d = 0; d < in.dim(); ++d) {
    if (out.shape[d] == 1 && in.shape[d] != 1) {
      kept.shape[d] = 1;
      count *= in.shape[d];
      ++n_reduced;
    } else {
      check(out.shape[d] == in.shape[d], name,
            "out " + shape_str(out.shape) + " does not match in " + shape_str(in.shape));
      reduced.shape[d] = 1;
    }
  }
  if (op == ReduceOp::argmax) {
    check(out.dtype == DType::i64, name, "argmax writes i64");
    check(n_reduced <= 1, name, "argmax reduces exactly one dim");
  } else {
    check_same_dtype(out, in, name);
  }
  if (op == ReduceOp::mean) check_floating(out, "reduce mean");
  if (op == ReduceOp::max || op == ReduceOp::min || op == ReduceOp::argmax)
    check(count > 0, name, "max/min/argmax of an empty tensor");
  if (out.numel() == 0) return;
  if (op == ReduceOp::sum || op == ReduceOp::mean)
    if (const auto cs = column_shape(out, in)) return column_sum(exec, out, in, *cs, op == ReduceOp::mean);

  const Indexer<2> rows = make_indexer<2>({&out, &kept}, name);
  const Indexer<1> positions = make_indexer<1>({&reduced}, name, /*keep_order=*/true);
  visit_dtype(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (op == ReduceOp::argmax)
      exec.rows(rows.numel, ReduceBody<T, int64_t>{out.ptr<int64_t>(), in.ptr<const T>(), op,
                                                   rows, positions, count});
    else
      exec.rows(rows.numel,
                ReduceBody<T, T>{out.ptr<T>(), in.ptr<const T>(), op, rows, positions, count});
  });
}

template <class Exec>
void set_reduce_kernels(Backend& b) {
  b.reduce = [](ReduceOp op, const View& out, const View& in) { reduce(Exec{}, op, out, in); };
}

}  // namespace ringflow::simt
