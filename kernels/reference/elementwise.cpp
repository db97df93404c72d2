// Elementwise reference kernels: copy, fill, unary, binary, where.
// Floating outputs compute in double and round once on store; integer outputs compute in
// int64 so that large i64 values survive (a double holds only 53 bits).
#include <cmath>
#include <limits>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::for_each_offset;
using strided::load_f64;
using strided::load_i64;
using strided::store_f64;
using strided::store_i64;

void copy(const View& dst, const View& src) {
  check_same_shape(dst, src, "copy");
  // Integer to integer stays in int64; anything else goes through double, which is exact
  // for every float dtype and matches static_cast for float -> int.
  const bool ints = !is_floating(dst.dtype) && !is_floating(src.dtype);
  for_each_offset(dst.shape, [&](const auto& o) {
    if (ints) store_i64(dst, o[0], load_i64(src, o[1]));
    else store_f64(dst, o[0], load_f64(src, o[1]));
  }, dst.strides, src.strides);
}

void fill(const View& dst, double value) {
  for_each_offset(dst.shape, [&](const auto& o) { store_f64(dst, o[0], value); }, dst.strides);
}

static double unary_f64(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::relu: return std::isnan(x) ? x : (x > 0 ? x : 0.0);  // NaN propagates
    case UnaryOp::abs: return std::fabs(x);
    case UnaryOp::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::tanh: return std::tanh(x);
  }
  return x;
}

void unary(UnaryOp op, const View& out, const View& in) {
  check_same_shape(out, in, "unary");
  if (is_floating(out.dtype)) {
    for_each_offset(out.shape, [&](const auto& o) {
      store_f64(out, o[0], unary_f64(op, load_f64(in, o[1])));
    }, out.strides, in.strides);
    return;
  }
  // Integer outputs: only the ops that map integers to integers.
  check(op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu, "unary",
        std::string(unary_op_name(op)) + " needs a floating output, got " +
            dtype_name(out.dtype));
  for_each_offset(out.shape, [&](const auto& o) {
    const int64_t x = load_i64(in, o[1]);
    int64_t r = x;
    if (op == UnaryOp::neg) r = -x;
    else if (op == UnaryOp::abs) r = x < 0 ? -x : x;
    else r = x > 0 ? x : 0;
    store_i64(out, o[0], r);
  }, out.strides, in.strides);
}

static bool is_comparison(BinaryOp op) {
  return op == BinaryOp::eq || op == BinaryOp::ne || op == BinaryOp::lt ||
         op == BinaryOp::le || op == BinaryOp::gt || op == BinaryOp::ge;
}

template <class T>
static bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::eq: return a == b;
    case BinaryOp::ne: return a != b;
    case BinaryOp::lt: return a < b;
    case BinaryOp::le: return a <= b;
    case BinaryOp::gt: return a > b;
    case BinaryOp::ge: return a >= b;
    default: return false;
  }
}

static double binary_f64(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::pow: return std::pow(a, b);
    // torch.maximum/minimum propagate NaN from either side.
    case BinaryOp::maximum:
      return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<double>::quiet_NaN()
                                              : (a > b ? a : b);
    case BinaryOp::minimum:
      return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<double>::quiet_NaN()
                                              : (a < b ? a : b);
    case BinaryOp::relu_backward: return b <= 0 ? 0.0 : a;
    default: return compare(op, a, b) ? 1.0 : 0.0;
  }
}

static int64_t binary_i64(BinaryOp op, int64_t a, int64_t b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div:
      // Integer division truncates toward zero (torch.div(rounding_mode='trunc')).
      check(b != 0, "binary", "integer division by zero");
      return a / b;
    case BinaryOp::pow: {
      check(b >= 0, "binary", "integers to negative integer powers are not allowed");
      int64_t r = 1;
      for (int64_t i = 0; i < b; ++i) r *= a;
      return r;
    }
    case BinaryOp::maximum: return a > b ? a : b;
    case BinaryOp::minimum: return a < b ? a : b;
    case BinaryOp::relu_backward: return b <= 0 ? 0 : a;
    default: return compare(op, a, b) ? 1 : 0;
  }
}

void binary(BinaryOp op, const View& out, const View& a, const View& b) {
  check_same_shape(out, a, "binary");
  check_same_shape(out, b, "binary");
  // Comparisons look at the operands' dtype; arithmetic at the output's.
  const bool as_float = is_comparison(op) ? (is_floating(a.dtype) || is_floating(b.dtype))
                                          : is_floating(out.dtype);
  for_each_offset(out.shape, [&](const auto& o) {
    if (as_float) {
      store_f64(out, o[0], binary_f64(op, load_f64(a, o[1]), load_f64(b, o[2])));
    } else {
      store_i64(out, o[0], binary_i64(op, load_i64(a, o[1]), load_i64(b, o[2])));
    }
  }, out.strides, a.strides, b.strides);
}

void where(const View& out, const View& cond, const View& a, const View& b) {
  check_same_shape(out, cond, "where");
  check_same_shape(out, a, "where");
  check_same_shape(out, b, "where");
  const bool ints = !is_floating(out.dtype);
  for_each_offset(out.shape, [&](const auto& o) {
    const bool take_a = is_floating(cond.dtype) ? load_f64(cond, o[1]) != 0.0
                                                : load_i64(cond, o[1]) != 0;
    const View& src = take_a ? a : b;
    const int64_t off = take_a ? o[2] : o[3];
    if (ints) store_i64(out, o[0], load_i64(src, off));
    else store_f64(out, o[0], load_f64(src, off));
  }, out.strides, cond.strides, a.strides, b.strides);
}

}  // namespace ringflow::reference
