// matmul with NumPy semantics on top of one batched kernel (B, M, K) @ (B, K, N), and linear.
#include "ringflow/framework/autocast.h"
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

// x (..., R, C) expanded to the batch shape and seen as (B, R, C) for the kernel. Copies only
// when the expanded batch dims cannot be merged into one stride; `owner` keeps the memory.
struct Batched {
  Tensor owner;
  View view;
};

Batched as_batched(const Tensor& x, const Shape& batch) {
  Shape full = batch;
  full.insert(full.end(), {x.size(-2), x.size(-1)});
  Batched out{x.detach().expand(full), {}};
  const Shape merged{shape_numel(batch), x.size(-2), x.size(-1)};
  Shape strides;
  if (!view_strides(out.owner.shape(), out.owner.strides(), merged, &strides)) {
    out.owner = out.owner.contiguous();
    strides = contiguous_strides(merged);
  }
  out.view = out.owner.kernel_view();
  out.view.shape = merged;
  out.view.strides = strides;
  return out;
}

// out: where to write the product (contiguous, of its shape), or undefined for a new tensor.
Tensor batched_matmul(const Tensor& a, const Tensor& b, Tensor out = {}) {
  const Shape batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                       Shape(b.shape().begin(), b.shape().end() - 2));
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {M, N});
  if (!out.defined()) out = empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (K == 0) return out.fill_(0.0);
  const Batched ba = as_batched(a, batch), bb = as_batched(b, batch);
  View vo = out.kernel_view();
  vo.shape = {shape_numel(batch), M, N};
  vo.strides = {M * N, N, 1};
  kernel(a.device(), &Backend::matmul, "matmul")(vo, ba.view, bb.view);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  if (autocast_enabled() && (a_in.dtype() == DType::f32 || b_in.dtype() == DType::f32))
    return matmul(autocast_to_low(a_in), autocast_to_low(b_in));
  RF_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul: operands must have at least 1 dim, got ",
           shape_str(a_in.shape()), " and ", shape_str(b_in.shape()));
  RF_CHECK(a_in.dtype() == b_in.dtype(), "matmul: dtypes differ: ", dtype_name(a_in.dtype()),
           " and ", dtype_name(b_in.dtype()));
  RF_CHECK(a_in.device() == b_in.device(), "matmul: tensors on ", a_in.device().str(), " and ",
           b_in.device().str());
  // 1-D operands: promote (and squeeze the result) by reshapes, which carry their own gradients.
  if (a_in.dim() == 1 && b_in.dim() == 1)
    return matmul(a_in.unsqueeze(0), b_in.unsqueeze(1)).reshape({});
  if (a_in.dim() == 1) return matmul(a_in.unsqueeze(0), b_in).squeeze(-2);
  if (b_in.dim() == 1) return matmul(a_in, b_in.unsqueeze(1)).squeeze(-1);
  RF_CHECK(a_in.size(-1) == b_in.size(-2), "matmul: shapes ", shape_str(a_in.shape()), " and ",
           shape_str(b_in.shape()), " cannot be multiplied (", a_in.size(-1), " != ",
           b_in.size(-2), ")");
  Tensor out = batched_matmul(a_in, b_in);
  if (grad_needed({a_in, b_in}))
    record("MatmulBackward", {a_in, b_in}, out,
           [a = a_in.detach(), b = b_in.detach(), ra = a_in.requires_grad(),
            rb = b_in.requires_grad()](const Tensor& g) {
             Tensor ga, gb;
             if (ra) ga = sum_to(matmul(g, b.transpose(-1, -2)), a.shape());
             if (rb) gb = sum_to(matmul(a.transpose(-1, -2), g), b.shape());
             return std::vector<Tensor>{ga, gb};
           });
  return out;
}

namespace {

// y = x @ w^T + bias (then relu), not recorded: in one kernel where the device's table has
// matmul_bias (cuBLASLt's epilogues on CUDA), else composed of matmul, add and relu.
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  const int64_t out_f = w.size(0), in_f = w.size(1);
  if (kernel_backend(x.device()).matmul_bias && bias.defined() && is_floating(x.dtype()) &&
      w.dtype() == x.dtype() && bias.dtype() == x.dtype() && w.device() == x.device() &&
      bias.device() == x.device()) {
    const Tensor x2 = x.reshape({-1, in_f});
    Tensor y = empty({x2.size(0), out_f}, x.dtype(), x.device());
    kernel(x.device(), &Backend::matmul_bias, "matmul_bias")(y.kernel_view(), x2.kernel_view(),
                                                              w.t().kernel_view(), bias.kernel_view(), relu);
    Shape shape = x.shape();
    shape.back() = out_f;
    return y.reshape(shape);
  }
  Tensor y = matmul(x, w.t());
  if (bias.defined()) y = add(y, bias);
  return relu ? ringflow::relu(y) : y;
}

// linear, and with relu the tail of an MLP's layer: one forward kernel where the device has
// it; backward masks the gradient with relu's output, then dx = g w, dw = g^T x, db = 1^T g.
Tensor linear_maybe_relu(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  RF_CHECK(w.dim() == 2, "linear: weight must be 2-D (out, in), got ", shape_str(w.shape()));
  RF_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input of shape ",
           shape_str(x.shape()), " does not match weight of shape ", shape_str(w.shape()),
           " (expected last dim ", w.size(1), ")");
  if (bias.defined())
    RF_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias of shape ",
             shape_str(bias.shape()), " for weight of shape ", shape_str(w.shape()));
  // In 16 bits, the bias added in them. The weight is cast whole (autocast's cache keeps one
  // cast per step), and LinearBackward's gradients go back through the casts.
  if (autocast_enabled() && (x.dtype() == DType::f32 || w.dtype() == DType::f32 ||
                             (bias.defined() && bias.dtype() == DType::f32)))
    return linear_maybe_relu(autocast_to_low(x), autocast_to_low(w), autocast_to_low(bias), relu);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = linear_forward(x, w, bias, relu);
  }
  if (grad_needed({x, w, bias}))
    record(relu ? "LinearReluBackward" : "LinearBackward", {x, w, bias}, y,
           [x = x.detach(), w = w.detach(), y = relu ? y.detach() : Tensor(), rx = x.requires_grad(),
            rw = w.requires_grad(), rb = bias.defined() && bias.requires_grad()](const Tensor& g_out) {
             // relu's mask from its output (relu_backward's rule, as relu's own backward).
             Tensor g = g_out;
             if (y.defined()) {
               g = empty_like(y);
               kernel(y.device(), &Backend::binary, "relu_backward")(
                   BinaryOp::relu_backward, g.kernel_view(), g_out.kernel_view(), y.kernel_view());
             }
             // g: (..., out) seen as (rows, out); x: (..., in) as (rows, in). The weight's and
             // the bias's gradients are computed in their layout, into their gradient
             // buffers where offered (Note [Gradient buffers]): dw = g^T x, db = 1^T g.
             const int64_t out_f = w.size(0), in_f = w.size(1);
             const Tensor g2 = g.reshape({-1, out_f});
             Tensor dx, dw, db;
             if (rx) dx = matmul(g, w);
             if (rw) {
               dw = new_input_grad(1, w.shape(), w.dtype(), w.device());
               batched_matmul(g2.t(), x.reshape({-1, in_f}), dw);
             }
             if (rb) {
               db = new_input_grad(2, {out_f}, w.dtype(), w.device());
               const Tensor ones_row = ones({1, g2.size(0)}, g2.dtype(), g2.device());
               batched_matmul(ones_row, g2, db.view({1, out_f}));
             }
             return std::vector<Tensor>{dx, dw, db};
           });
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return linear_maybe_relu(x, w, bias, /*relu=*/false);
}

Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return linear_maybe_relu(x, w, bias, /*relu=*/true);
}

}  // namespace ringflow
