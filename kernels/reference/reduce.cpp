// Reductions (sum, mean, max, min, argmax) over the dims where out has size 1 and in does
// not. Accumulators live in a contiguous scratch array indexed like out; each input
// element finds its accumulator through "scratch strides" that are 0 in reduced dims.
#include <cmath>
#include <limits>
#include <vector>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::for_each_offset;

void reduce(ReduceOp op, const View& out, const View& in) {
  const char* name = "reduce";
  check(out.dim() == in.dim(), name,
        "out " + shape_str(out.shape) + " must have in's rank " + shape_str(in.shape));
  std::vector<int> reduced;
  int64_t count = 1;  // elements folded into each output
  for (int d = 0; d < in.dim(); ++d) {
    if (out.shape[d] == 1 && in.shape[d] != 1) {
      reduced.push_back(d);
      count *= in.shape[d];
    } else {
      check(out.shape[d] == in.shape[d], name,
            "out " + shape_str(out.shape) + " does not match in " + shape_str(in.shape));
    }
  }
  if (op == ReduceOp::argmax) {
    check(out.dtype == DType::i64, name, "argmax writes i64");
    check(reduced.size() <= 1, name, "argmax reduces exactly one dim");
  }
  if (op == ReduceOp::mean) check_floating(out, "reduce mean");
  if (op == ReduceOp::max || op == ReduceOp::min || op == ReduceOp::argmax) {
    check(count > 0, name, "max/min/argmax of an empty tensor");
  }

  Shape scratch_strides = contiguous_strides(out.shape);
  for (int d : reduced) scratch_strides[d] = 0;
  const int64_t n_out = out.numel();
  const bool ints = !is_floating(in.dtype);

  if (op == ReduceOp::argmax) {
    // Position along the reduced dim comes from the input offset's position: walk the
    // input in row-major order, so the first maximum is seen first; ties keep it.
    // NaN counts as larger than anything (PyTorch), and the first NaN wins.
    std::vector<double> best(n_out, -std::numeric_limits<double>::infinity());
    std::vector<int64_t> best_i64(n_out, std::numeric_limits<int64_t>::min());
    std::vector<int64_t> arg(n_out, -1);
    std::vector<int64_t> seen(n_out, 0);  // elements visited per output = position in dim
    for_each_offset(in.shape, [&](const auto& o) {
      const int64_t s = o[1];
      const int64_t pos = seen[s]++;
      bool better;
      if (ints) {
        const int64_t v = strided::load_i64(in, o[0]);
        better = arg[s] < 0 || v > best_i64[s];
        if (better) best_i64[s] = v;
      } else {
        const double v = strided::load_f64(in, o[0]);
        better = arg[s] < 0 || (!std::isnan(best[s]) && (v > best[s] || std::isnan(v)));
        if (better) best[s] = v;
      }
      if (better) arg[s] = pos;
    }, in.strides, scratch_strides);
    for_each_offset(out.shape, [&](const auto& o) {
      strided::store_i64(out, o[0], arg[o[1]]);
    }, out.strides, contiguous_strides(out.shape));
    return;
  }

  if (ints && op != ReduceOp::mean) {
    std::vector<int64_t> acc(n_out);
    std::vector<bool> started(n_out, false);
    for_each_offset(in.shape, [&](const auto& o) {
      const int64_t v = strided::load_i64(in, o[0]);
      int64_t& a = acc[o[1]];
      if (op == ReduceOp::sum) a += v;
      else if (!started[o[1]]) a = v;
      else if (op == ReduceOp::max) a = v > a ? v : a;
      else a = v < a ? v : a;
      started[o[1]] = true;
    }, in.strides, scratch_strides);
    for_each_offset(out.shape, [&](const auto& o) {
      strided::store_i64(out, o[0], acc[o[1]]);
    }, out.strides, contiguous_strides(out.shape));
    return;
  }

  std::vector<double> acc(n_out, 0.0);
  std::vector<bool> started(n_out, false);
  for_each_offset(in.shape, [&](const auto& o) {
    const double v = strided::load_f64(in, o[0]);
    double& a = acc[o[1]];
    if (op == ReduceOp::sum || op == ReduceOp::mean) {
      a += v;
    } else if (!started[o[1]] || std::isnan(v)) {
      a = v;  // max/min propagate NaN: once a is NaN no comparison replaces it
    } else if (op == ReduceOp::max) {
      a = v > a ? v : a;
    } else {
      a = v < a ? v : a;
    }
    started[o[1]] = true;
  }, in.strides, scratch_strides);
  for_each_offset(out.shape, [&](const auto& o) {
    double a = acc[o[1]];
    if (op == ReduceOp::mean) a /= static_cast<double>(count);  // 0/0 = NaN, as PyTorch
    strided::store_f64(out, o[0], a);
  }, out.strides, contiguous_strides(out.shape));
}

}  // namespace ringflow::reference
