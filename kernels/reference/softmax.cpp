// Softmax and log-softmax along one dim, forward (max-subtracted, in double) and backward
// from the forward output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
#include <cmath>
#include <limits>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::load_f64;
using strided::store_f64;

namespace {

// Shape of the "lines" along dim: v's shape with that dim set to 1.
Shape line_shape(const View& v, int64_t dim, const char* op) {
  check(dim >= 0 && dim < v.dim(), op, "dim " + std::to_string(dim) + " out of range for " +
                                           shape_str(v.shape));
  Shape s = v.shape;
  s[dim] = 1;
  return s;
}

}  // namespace

void softmax_forward(const View& y, const View& x, int64_t dim, bool log) {
  const char* op = "softmax_forward";
  check_floating(y, op);
  check_same_shape(y, x, op);
  const Shape lines = line_shape(x, dim, op);
  const int64_t L = x.shape[dim], sx = x.strides[dim], sy = y.strides[dim];
  strided::for_each_offset(lines, [&](const auto& o) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < L; ++i) m = std::fmax(m, load_f64(x, o[1] + i * sx));
    double sum = 0.0;
    for (int64_t i = 0; i < L; ++i) sum += std::exp(load_f64(x, o[1] + i * sx) - m);
    for (int64_t i = 0; i < L; ++i) {
      const double v = load_f64(x, o[1] + i * sx) - m;
      store_f64(y, o[0] + i * sy, log ? v - std::log(sum) : std::exp(v) / sum);
    }
  }, y.strides, x.strides);
}

void softmax_backward(const View& dx, const View& dy, const View& y, int64_t dim, bool log) {
  const char* op = "softmax_backward";
  check_floating(dx, op);
  check_same_shape(dx, y, op);
  check_same_shape(dy, y, op);
  const Shape lines = line_shape(y, dim, op);
  const int64_t L = y.shape[dim];
  const int64_t sdx = dx.strides[dim], sdy = dy.strides[dim], sy = y.strides[dim];
  strided::for_each_offset(lines, [&](const auto& o) {
    double sum = 0.0;  // softmax: sum(dy * y); log_softmax: sum(dy)
    for (int64_t i = 0; i < L; ++i) {
      const double g = load_f64(dy, o[1] + i * sdy);
      sum += log ? g : g * load_f64(y, o[2] + i * sy);
    }
    for (int64_t i = 0; i < L; ++i) {
      const double g = load_f64(dy, o[1] + i * sdy), yi = load_f64(y, o[2] + i * sy);
      store_f64(dx, o[0] + i * sdx, log ? g - std::exp(yi) * sum : yi * (g - sum));
    }
  }, dx.strides, dy.strides, y.strides);
}

}  // namespace ringflow::reference
