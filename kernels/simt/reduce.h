// Reductions (sum, mean, max, min, argmax) over the dims where out has size 1 and in does
// not: one block per output element, its threads folding the reduced elements (block
// reduction, simt.h), thread 0 storing. Sums accumulate in float (double for f64, int64 for
// integers); max/min propagate NaN; argmax takes the first maximum, or the first NaN.
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
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
