// Batch normalisation (PyTorch's F.batch_norm): batch statistics and running-stat updates
// in training, running statistics in eval.
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

DType stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

void check_channel_vector(const Tensor& t, const char* what, int64_t C, DType dtype,
                          const Tensor& x) {
  if (!t.defined()) return;
  RF_CHECK(t.dim() == 1 && t.size(0) == C, "batch_norm: ", what, " of shape ",
           shape_str(t.shape()), " for input ", shape_str(x.shape()), " (expected (", C, ",))");
  RF_CHECK(t.dtype() == dtype && t.device() == x.device(), "batch_norm: ", what, " must be ",
           dtype_name(dtype), " on ", x.device().str(), ", got ", dtype_name(t.dtype()), " on ",
           t.device().str());
}

// Per-channel vector viewed for broadcasting against x: (1, C, 1, 1) or (1, C).
Tensor per_channel(const Tensor& v, const Tensor& x) {
  Shape s(x.dim(), 1);
  s[1] = x.size(1);
  return v.reshape(s);
}

Shape non_channel_dims(const Tensor& x) {
  Shape d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  // Under autocast x keeps its 16 bits, as in torch.autocast; the statistics, the running
  // buffers and gamma/beta stay f32 (the kernels accumulate in f32).
  const Tensor& x = x_in;
  RF_CHECK(x.dim() == 2 || x.dim() == 4, "batch_norm: input must be (N, C) or (N, C, H, W), got ",
           shape_str(x.shape()));
  const int64_t C = x.size(1);
  const DType sd = stats_dtype(x.dtype());
  check_channel_vector(running_mean, "running_mean", C, sd, x);
  check_channel_vector(running_var, "running_var", C, sd, x);
  check_channel_vector(weight, "weight", C, sd, x);
  check_channel_vector(bias, "bias", C, sd, x);
  const View wv = weight.defined() ? weight.kernel_view() : View{};
  const View bv = bias.defined() ? bias.kernel_view() : View{};
  const View* wp = weight.defined() ? &wv : nullptr;
  const View* bp = bias.defined() ? &bv : nullptr;
  Tensor y = empty_like(x);

  if (!training) {
    RF_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: eval mode needs running_mean and running_var");
    kernel(x.device(), &Backend::batch_norm_forward_eval, "batch_norm_forward_eval")(
        y.kernel_view(), x.kernel_view(), running_mean.kernel_view(), running_var.kernel_view(),
        wp, bp, eps);
    if (grad_needed({x, weight, bias}))
      record("BatchNormEvalBackward", {x, weight, bias}, y,
             [x = x.detach(), rm = running_mean.detach(), rv = running_var.detach(),
              w = weight.defined() ? weight.detach() : Tensor(), eps](const Tensor& g) {
               Tensor invstd = div(ones_like(rv), sqrt(rv + eps));
               Tensor scale = w.defined() ? mul(w, invstd) : invstd;
               Tensor dx = mul(g, per_channel(scale, x).to(g.dtype()));
               Tensor xhat = mul(sub(x.to(rm.dtype()), per_channel(rm, x)), per_channel(invstd, x));
               const Shape dims = non_channel_dims(x);
               Tensor dw = w.defined() ? sum(mul(g.to(rm.dtype()), xhat), dims) : Tensor();
               return std::vector<Tensor>{dx, dw, sum(g.to(rm.dtype()), dims)};
             });
    return y;
  }

  const int64_t per_channel_count = x.numel() / std::max<int64_t>(C, 1);
  RF_CHECK(per_channel_count > 1, "batch_norm: training needs more than 1 value per channel, ",
           "got input ", shape_str(x.shape()));
  Tensor mean = empty({C}, sd, x.device()), var = empty({C}, sd, x.device());
  kernel(x.device(), &Backend::batch_norm_forward_train, "batch_norm_forward_train")(
      y.kernel_view(), mean.kernel_view(), var.kernel_view(), x.kernel_view(), wp, bp, eps);
  if (running_mean.defined() || running_var.defined()) {
    NoGradGuard no_grad;
    const double n = static_cast<double>(per_channel_count);
    Tensor rm = running_mean, rv = running_var;  // handles alias the caller's buffers
    if (rm.defined()) rm.mul_(1.0 - momentum).add_(mean, momentum);
    if (rv.defined()) rv.mul_(1.0 - momentum).add_(var, momentum * n / (n - 1.0));
  }
  if (grad_needed({x, weight, bias}))
    record("BatchNormBackward", {x, weight, bias}, y,
           [x = x.detach(), mean, var, w = weight.defined() ? weight.detach() : Tensor(), eps,
            rw = weight.defined() && weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             Tensor dx = empty_like(x);
             // Into the parameters' gradient buffers where offered (Note [Gradient buffers]).
             Tensor dw = rw ? new_input_grad(1, w.shape(), w.dtype(), w.device()) : Tensor();
             Tensor db = rb ? new_input_grad(2, w.shape(), w.dtype(), w.device()) : Tensor();
             const View wv = w.defined() ? w.kernel_view() : View{};
             const View dwv = rw ? dw.kernel_view() : View{};
             const View dbv = rb ? db.kernel_view() : View{};
             kernel(g.device(), &Backend::batch_norm_backward, "batch_norm_backward")(
                 dx.kernel_view(), rw ? &dwv : nullptr, rb ? &dbv : nullptr, g.kernel_view(),
                 x.kernel_view(), mean.kernel_view(), var.kernel_view(),
                 w.defined() ? &wv : nullptr, eps);
             return std::vector<Tensor>{dx, dw, db};
           });
  return y;
}

}  // namespace ringflow
