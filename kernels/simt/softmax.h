// Softmax and log-softmax along one dim, one block per line: the line's maximum (NaN
// ignored, as fmax), the sum of exp(x - max), then every element; backward from the
// forward output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
#pragma once

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/simt/check.h"
#include "ringflow/kernels/simt/indexer.h"
#include "ringflow/kernels/simt/simt.h"

namespace ringflow::simt {

template <class T>
struct SoftmaxForwardBody {
  T* y;
  const T* x;
  Indexer<2> lines;  // line -> (y offset, x offset) of its first element
  int64_t len, sy, sx;
  bool log;

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t line) const {
    using A = acc_t<T>;
    int64_t o[2];
    lines.offsets(line, o);
    const auto at = [&](int64_t i) { return load(x[o[1] + i * sx]); };
    const A m = block.reduce(len, lowest<A>(), at, [](A a, A b) {
      return isnan(a) ? b : (isnan(b) ? a : (a > b ? a : b));
    });
    const A sum = block.reduce(len, A(0), [&](int64_t i) { return simt::exp(at(i) - m); },
                               [](A a, A b) { return a + b; });
    const A log_sum = simt::log(sum);
    block.for_each(len, [&](int64_t i) {
      const A v = at(i) - m;
      y[o[0] + i * sy] = store<T>(log ? v - log_sum : simt::exp(v) / sum);
    });
  }
};

template <class T>
struct SoftmaxBackwardBody {
  T* dx;
  const T* dy;
  const T* y;
  Indexer<3> lines;  // line -> (dx, dy, y) offsets of its first element
  int64_t len, sdx, sdy, sy;
  bool log;

  template <class Block>
  RF_HD void operator()(const Block& block, int64_t line) const {
    using A = acc_t<T>;
    int64_t o[3];
    lines.offsets(line, o);
    const A sum = block.reduce(len, A(0), [&](int64_t i) {
      const A g = load(dy[o[1] + i * sdy]);
      return log ? g : g * load(y[o[2] + i * sy]);
    }, [](A a, A b) { return a + b; });
    block.for_each(len, [&](int64_t i) {
      const A g = load(dy[o[1] + i * sdy]), yi = load(y[o[2] + i * sy]);
      dx[o[0] + i * sdx] = store<T>(log ? g - simt::exp(yi) * sum : yi * (g - sum));
    });
  }
};

// v's shape with `dim` set to 1: the lines' starting points.
inline View line_starts(const View& v, int64_t dim, const char* op) {
  check(dim >= 0 && dim < v.dim(), op,
        "dim " + std::to_string(dim) + " out of range for " + shape_str(v.shape));
  View s = v;
  s.shape[dim] = 1;
  return s;
}

template <class Exec>
void softmax_forward(const Exec& exec, const View& y, const View& x, int64_t dim, bool log) {
  const char* op = "softmax_forward";
  check_floating(y, op);
  check_same_shape(y, x, op);
  check_same_dtype(y, x, op);
  const View ys = line_starts(y, dim, op), xs = line_starts(x, dim, op);
  if (y.numel() == 0) return;
  const Indexer<2> lines = make_indexer<2>({&ys, &xs}, op);
  visit_floating(y.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    exec.rows(lines.numel, SoftmaxForwardBody<T>{y.ptr<T>(), x.ptr<const T>(), lines,
                                                 x.shape[dim], y.strides[dim], x.strides[dim],
                                                 log});
  });
}

template <class Exec>
void softmax_backward(const Exec& exec, const View& dx, const View& dy, const View& y,
                      int64_t dim, bool log) {
  const char* op = "softmax_backward";
  check_floating(dx, op);
  check_same_shape(dx, y, op);
  check_same_shape(dy, y, op);
  check_same_dtype(dx, y, op);
  check_same_dtype(dy, y, op);
  const View dxs = line_starts(dx, dim, op), dys = line_starts(dy, dim, op),
             ys = line_starts(y, dim, op);
  if (y.numel() == 0) return;
  const Indexer<3> lines = make_indexer<3>({&dxs, &dys, &ys}, op);
  visit_floating(y.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    exec.rows(lines.numel,
              SoftmaxBackwardBody<T>{dx.ptr<T>(), dy.ptr<const T>(), y.ptr<const T>(), lines,
                                     y.shape[dim], dx.strides[dim], dy.strides[dim],
                                     y.strides[dim], log});
  });
}

template <class Exec>
void set_softmax_kernels(Backend& b) {
  b.softmax_forward = [](const View& y, const View& x, int64_t dim, bool log) {
    softmax_forward(Exec{}, y, x, dim, log);
  };
  b.softmax_backward = [](const View& dx, const View& dy, const View& y, int64_t dim, bool log) {
    softmax_backward(Exec{}, dx, dy, y, dim, log);
  };
}

}  // namespace ringflow::simt
