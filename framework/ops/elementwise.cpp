// Elementwise ops with broadcasting, and their gradients written with forward ops.
#include <algorithm>
#include <cmath>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {

namespace {

// Whether a and b broadcast together: aligned at their last dims, each pair equal or one 1.
bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t da = a[a.size() - i], db = b[b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

// where's result shape; a shape that does not broadcast is named by its role.
Shape where_shape(const Shape& cond, const Shape& a, const Shape& b) {
  RF_CHECK(broadcastable(a, b), "where: input ", shape_str(a), " and other ", shape_str(b),
           " cannot be broadcast together");
  const Shape values = broadcast_shapes(a, b);
  RF_CHECK(broadcastable(cond, values), "where: the condition's shape ", shape_str(cond),
           " does not broadcast with the values' ", shape_str(values), " (input ", shape_str(a), ", other ",
           shape_str(b), ")");
  return broadcast_shapes(cond, values);
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  RF_CHECK(broadcastable(a, b), "shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast together");
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const size_t lead = t.dim() - shape.size();
  Shape dims;
  for (size_t i = 0; i < static_cast<size_t>(t.dim()); ++i)
    if (i < lead || (shape[i - lead] == 1 && t.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  return sum(t, dims, /*keepdim=*/true).reshape(shape);
}

namespace {

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  RF_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ: ", dtype_name(a.dtype()), " ",
           shape_str(a.shape()), " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
           "; convert one with to(dtype)");
  RF_CHECK(a.device() == b.device(), op, ": tensors on ", a.device().str(), " and ",
           b.device().str());
}

// The output takes the layout of the first operand that already has the output's shape;
// for the kernels of Note [blocked operands] (`blocked_ok`), a blocked one where both
// operands share it (otherwise their kernel views convert them).
Tensor output_for(const Shape& shape, const Tensor& a, const Tensor& b, bool blocked_ok = true) {
  if (blocked_ok && a.shape() == shape && b.shape() == shape && a.kernel_layout() == b.kernel_layout())
    return empty_like_layout(a, shape);
  if (a.shape() == shape) return empty_like(a);
  if (b.shape() == shape) return empty_like(b);
  return empty(shape, a.dtype(), a.device());
}

// What the kernel sees of t broadcast to shape (an operand of that shape as it is: the
// common case, without the views that expand makes).
View broadcast_view(const Tensor& t, const Shape& shape) {
  return t.shape() == shape ? t.kernel_view() : t.detach().expand(shape).kernel_view();
}

// What the kernel sees of t broadcast to out's shape, in out's layout (an operand of that
// shape as it is: the common case, without the views that expand makes).
View operand_view(const Tensor& t, const Tensor& out) {
  return out.layout() == MemoryLayout::strided ? broadcast_view(t, out.shape()) : t.kernel_view_any_layout();
}

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same(a, b, binary_op_name(op));
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out = output_for(shape, a, b);
  if (out.numel() > 0)
    kernel(a.device(), &Backend::binary, binary_op_name(op))(
        op, out.kernel_view_any_layout(), operand_view(a, out), operand_view(b, out));
  return out;
}

Tensor unary_forward(UnaryOp op, const Tensor& a) {
  Tensor out = empty_like_layout(a, a.shape());
  if (out.numel() > 0)
    kernel(a.device(), &Backend::unary, unary_op_name(op))(op, out.kernel_view_any_layout(),
                                                           operand_view(a, out));
  return out;
}

Tensor comparison(BinaryOp op, const Tensor& a, const Tensor& b) { return binary_forward(op, a, b); }

Tensor scalar_like(double v, const Tensor& t) { return scalar_tensor(v, t.dtype(), t.device()); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::add, a, b);
  if (grad_needed({a, b}))
    record("AddBackward", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
    });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::sub, a, b);
  if (grad_needed({a, b}))
    record("SubBackward", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
    });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::mul, a, b);
  if (grad_needed({a, b}))
    record("MulBackward", {a, b}, out,
           [a = a.detach(), b = b.detach(), ra = a.requires_grad(), rb = b.requires_grad()](
               const Tensor& g) {
             return std::vector<Tensor>{ra ? sum_to(mul(g, b), a.shape()) : Tensor(),
                                        rb ? sum_to(mul(g, a), b.shape()) : Tensor()};
           });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::div, a, b);
  if (grad_needed({a, b}))
    record("DivBackward", {a, b}, out,
           [a = a.detach(), b = b.detach(), rb = b.requires_grad()](const Tensor& g) {
             Tensor gb;
             if (rb) gb = sum_to(neg(div(mul(g, a), mul(b, b))), b.shape());
             return std::vector<Tensor>{sum_to(div(g, b), a.shape()), gb};
           });
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::pow, a, b);
  if (grad_needed({a, b}))
    record("PowBackward", {a, b}, out,
           [a = a.detach(), b = b.detach(), y = out.detach(), rb = b.requires_grad()](
               const Tensor& g) {
             // d/da a^b = b a^(b-1);  d/db a^b = a^b log a. As PyTorch: none to a where
             // b == 0 (a^0 = 1, even for a NaN or an inf a), none to b where a == 0 and
             // b >= 0 (log 0 = -inf would make it NaN).
             Tensor zero = scalar_like(0.0, g);
             Tensor ga = sum_to(where(eq(b, zero), zero,
                                      mul(g, mul(b, pow(a, sub(b, scalar_like(1.0, b)))))),
                                a.shape());
             Tensor gb;
             if (rb)
               gb = sum_to(where(mul(eq(a, zero), ge(b, zero)), zero, mul(g, mul(y, log(a)))),
                           b.shape());
             return std::vector<Tensor>{ga, gb};
           });
  return out;
}

Tensor pow(const Tensor& a, double exponent) { return pow(a, scalar_like(exponent, a)); }
Tensor add(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor div(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }

namespace {
// Gradient of maximum/minimum, PyTorch's rule: all of it to each operand but the one that
// loses, split evenly on ties; where a NaN makes both lose nothing, both take all of it.
Tensor select_grad(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(op, a, b);
  if (grad_needed({a, b}))
    record(op == BinaryOp::maximum ? "MaximumBackward" : "MinimumBackward", {a, b}, out,
           [a = a.detach(), b = b.detach(), op](const Tensor& g) {
             const bool max = op == BinaryOp::maximum;
             Tensor tie = mul(comparison(BinaryOp::eq, a, b), scalar_like(0.5, g));
             Tensor one = scalar_like(1.0, g);
             Tensor wa = sub(sub(one, comparison(max ? BinaryOp::lt : BinaryOp::gt, a, b)), tie);
             Tensor wb = sub(sub(one, comparison(max ? BinaryOp::gt : BinaryOp::lt, a, b)), tie);
             return std::vector<Tensor>{sum_to(mul(g, wa), a.shape()), sum_to(mul(g, wb), b.shape())};
           });
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return select_grad(BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return select_grad(BinaryOp::minimum, a, b); }

Tensor neg(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::neg, a);
  if (grad_needed({a}))
    record("NegBackward", {a}, out, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
  return out;
}

Tensor exp(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::exp, a);
  if (grad_needed({a}))
    record("ExpBackward", {a}, out,
           [y = out.detach()](const Tensor& g) { return std::vector<Tensor>{mul(g, y)}; });
  return out;
}

Tensor log(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::log, a);
  if (grad_needed({a}))
    record("LogBackward", {a}, out,
           [a = a.detach()](const Tensor& g) { return std::vector<Tensor>{div(g, a)}; });
  return out;
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::sqrt, a);
  if (grad_needed({a}))
    record("SqrtBackward", {a}, out, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{div(g, mul(y, scalar_like(2.0, y)))};
    });
  return out;
}

Tensor abs(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::abs, a);
  if (grad_needed({a}))
    record("AbsBackward", {a}, out, [a = a.detach()](const Tensor& g) {
      Tensor zero = scalar_like(0.0, a);
      Tensor sign = sub(comparison(BinaryOp::gt, a, zero), comparison(BinaryOp::lt, a, zero));
      return std::vector<Tensor>{mul(g, sign)};
    });
  return out;
}

Tensor sigmoid(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::sigmoid, a);
  if (grad_needed({a}))
    record("SigmoidBackward", {a}, out, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{mul(g, mul(y, sub(scalar_like(1.0, y), y)))};
    });
  return out;
}

Tensor tanh(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::tanh, a);
  if (grad_needed({a}))
    record("TanhBackward", {a}, out, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{mul(g, sub(scalar_like(1.0, y), mul(y, y)))};
    });
  return out;
}

Tensor relu(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::relu, a);
  if (grad_needed({a}))
    record("ReluBackward", {a}, out, [y = out.detach()](const Tensor& g) {
      // relu'(x) = [x > 0] = [relu(x) > 0]: saving the output lets the input be freed. A
      // NaN passes the gradient on, as PyTorch's threshold_backward (relu_backward's rule).
      Tensor dx = output_for(g.shape(), g, y);
      kernel(g.device(), &Backend::binary, "relu_backward")(
          BinaryOp::relu_backward, dx.kernel_view_any_layout(), operand_view(g, dx), operand_view(y, dx));
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor eq(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return comparison(BinaryOp::ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same(a, b, "where");
  RF_CHECK(cond.device() == a.device(), "where: condition on ", cond.device().str(),
           " and values on ", a.device().str());
  const Shape shape = where_shape(cond.shape(), a.shape(), b.shape());
  Tensor out = output_for(shape, a, b, /*blocked_ok=*/false);
  if (out.numel() > 0)
    kernel(a.device(), &Backend::where, "where")(
        out.kernel_view(), broadcast_view(cond, shape), broadcast_view(a, shape),
        broadcast_view(b, shape));
  if (grad_needed({a, b}))
    record("WhereBackward", {a, b}, out,
           [c = cond.detach(), sa = a.shape(), sb = b.shape()](const Tensor& g) {
             Tensor zero = scalar_like(0.0, g);
             return std::vector<Tensor>{sum_to(where(c, g, zero), sa), sum_to(where(c, zero, g), sb)};
           });
  return out;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

}  // namespace ringflow
