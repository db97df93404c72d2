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

namespace {

// Training: the running statistics from the batch's, in one kernel where the table has it.
void update_running_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                          const Tensor& num_batches_tracked, const Tensor& mean, const Tensor& var,
                          double momentum, int64_t count) {
  if (!running_mean.defined() && !running_var.defined() && !num_batches_tracked.defined()) return;
  RF_CHECK(!num_batches_tracked.defined() ||
               (num_batches_tracked.numel() == 1 && num_batches_tracked.dtype() == DType::i64 &&
                num_batches_tracked.device() == x.device()),
           "batch_norm: num_batches_tracked must be one i64 on ", x.device().str());
  RF_CHECK(momentum >= 0 || num_batches_tracked.defined(),
           "batch_norm: a cumulative average (momentum < 0) needs num_batches_tracked");
  NoGradGuard no_grad;
  const Backend& table = kernel_backend(x.device());
  if (table.batch_norm_update_stats) {
    const View rm = running_mean.defined() ? running_mean.kernel_view() : View{};
    const View rv = running_var.defined() ? running_var.kernel_view() : View{};
    const View nb = num_batches_tracked.defined() ? num_batches_tracked.kernel_view() : View{};
    kernel(x.device(), &Backend::batch_norm_update_stats, "batch_norm_update_stats")(
        running_mean.defined() ? &rm : nullptr, running_var.defined() ? &rv : nullptr,
        num_batches_tracked.defined() ? &nb : nullptr, mean.kernel_view(), var.kernel_view(), momentum, count);
    for (const Tensor* t : {&running_mean, &running_var, &num_batches_tracked})
      if (t->defined()) t->storage()->bump_version();
    return;
  }
  // Composed (a table without the kernel): through the host for the count.
  double factor = momentum;
  if (num_batches_tracked.defined()) {
    Tensor(num_batches_tracked).fill_(num_batches_tracked.item() + 1);
    if (momentum < 0) factor = 1.0 / num_batches_tracked.item();
  }
  const double n = static_cast<double>(count);
  Tensor rm = running_mean, rv = running_var;  // handles alias the caller's buffers
  if (rm.defined()) rm.mul_(1.0 - factor).add_(mean, factor);
  if (rv.defined()) rv.mul_(1.0 - factor).add_(var, factor * n / (n - 1.0));
}

// The checks of batch_norm and batch_norm_relu; the statistics' dtype.
DType check_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias) {
  RF_CHECK(x.dim() == 2 || x.dim() == 4, "batch_norm: input must be (N, C) or (N, C, H, W), got ",
           shape_str(x.shape()));
  const int64_t C = x.size(1);
  const DType sd = stats_dtype(x.dtype());
  check_channel_vector(running_mean, "running_mean", C, sd, x);
  check_channel_vector(running_var, "running_var", C, sd, x);
  check_channel_vector(weight, "weight", C, sd, x);
  check_channel_vector(bias, "bias", C, sd, x);
  return sd;
}

// Training batch norm fused with relu(y + residual) on a table that has the kernels.
Tensor fused_batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                             const Tensor& num_batches_tracked, const Tensor& weight, const Tensor& bias,
                             double momentum, double eps, const Tensor& residual) {
  const int64_t C = x.size(1), count = x.numel() / std::max<int64_t>(C, 1);
  RF_CHECK(count > 1, "batch_norm: training needs more than 1 value per channel, got input ",
           shape_str(x.shape()));
  const DType sd = stats_dtype(x.dtype());
  const View wv = weight.defined() ? weight.kernel_view() : View{};
  const View bv = bias.defined() ? bias.kernel_view() : View{};
  const View rv = residual.defined() ? residual.kernel_view() : View{};
  Tensor y = empty_like(x), mean = empty({C}, sd, x.device()), var = empty({C}, sd, x.device());
  kernel(x.device(), &Backend::batch_norm_relu_forward_train, "batch_norm_relu_forward_train")(
      y.kernel_view(), mean.kernel_view(), var.kernel_view(), x.kernel_view(), weight.defined() ? &wv : nullptr,
      bias.defined() ? &bv : nullptr, residual.defined() ? &rv : nullptr, eps);
  update_running_stats(x, running_mean, running_var, num_batches_tracked, mean, var, momentum, count);
  if (grad_needed({x, weight, bias, residual}))
    record("BatchNormReluBackward", {x, weight, bias, residual}, y,
           [x = x.detach(), y = y.detach(), mean, var, w = weight.defined() ? weight.detach() : Tensor(), eps,
            rw = weight.defined() && weight.requires_grad(), rb = bias.defined() && bias.requires_grad(),
            rr = residual.defined() && residual.requires_grad()](const Tensor& g) {
             Tensor dx = empty_like(x);
             // Into the parameters' gradient buffers where offered (Note [Gradient buffers]).
             Tensor dw = rw ? new_input_grad(1, w.shape(), w.dtype(), w.device()) : Tensor();
             Tensor db = rb ? new_input_grad(2, w.shape(), w.dtype(), w.device()) : Tensor();
             Tensor dr = rr ? empty_like(x) : Tensor();
             const View wv = w.defined() ? w.kernel_view() : View{};
             const View dwv = rw ? dw.kernel_view() : View{};
             const View dbv = rb ? db.kernel_view() : View{};
             const View drv = rr ? dr.kernel_view() : View{};
             kernel(g.device(), &Backend::batch_norm_relu_backward, "batch_norm_relu_backward")(
                 dx.kernel_view(), rr ? &drv : nullptr, rw ? &dwv : nullptr, rb ? &dbv : nullptr, g.kernel_view(),
                 y.kernel_view(), x.kernel_view(), mean.kernel_view(), var.kernel_view(),
                 w.defined() ? &wv : nullptr, eps);
             return std::vector<Tensor>{dx, dw, db, dr};
           });
  return y;
}

}  // namespace

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const Tensor& residual, const Tensor& num_batches_tracked) {
  check_batch_norm(x, running_mean, running_var, weight, bias);
  if (residual.defined())
    RF_CHECK(residual.shape() == x.shape() && residual.device() == x.device(), "batch_norm_relu: residual ",
             shape_str(residual.shape()), " on ", residual.device().str(), " for input ", shape_str(x.shape()),
             " on ", x.device().str());
  // Not on oneDNN's blocked layout (Note [blocked tensors]): the separate kernels keep it.
  const bool fused = training && kernel_backend(x.device()).batch_norm_relu_forward_train &&
                     x.layout() == MemoryLayout::strided &&
                     (!residual.defined() ||
                      (residual.dtype() == x.dtype() && residual.layout() == MemoryLayout::strided));
  if (fused)
    return fused_batch_norm_relu(x, running_mean, running_var, num_batches_tracked, weight, bias, momentum,
                                 eps, residual);
  const Tensor y = batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps,
                              num_batches_tracked);
  return relu(residual.defined() ? add(y, residual) : y);
}

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps, const Tensor& num_batches_tracked) {
  // Under autocast x keeps its 16 bits, as in torch.autocast; the statistics, the running
  // buffers and gamma/beta stay f32 (the kernels accumulate in f32).
  const Tensor& x = x_in;
  const DType sd = check_batch_norm(x, running_mean, running_var, weight, bias);
  const int64_t C = x.size(1);
  const View wv = weight.defined() ? weight.kernel_view() : View{};
  const View bv = bias.defined() ? bias.kernel_view() : View{};
  const View* wp = weight.defined() ? &wv : nullptr;
  const View* bp = bias.defined() ? &bv : nullptr;
  Tensor y = empty_like_layout(x, x.shape());  // blocked where x is (Note [blocked tensors])

  if (!training) {
    RF_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: eval mode needs running_mean and running_var");
    kernel(x.device(), &Backend::batch_norm_forward_eval, "batch_norm_forward_eval")(
        y.kernel_view_any_layout(), x.kernel_view_any_layout(), running_mean.kernel_view(), running_var.kernel_view(),
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
      y.kernel_view_any_layout(), mean.kernel_view(), var.kernel_view(), x.kernel_view_any_layout(), wp, bp, eps);
  update_running_stats(x, running_mean, running_var, num_batches_tracked, mean, var, momentum,
                       per_channel_count);
  if (grad_needed({x, weight, bias}))
    record("BatchNormBackward", {x, weight, bias}, y,
           [x = x.detach(), mean, var, w = weight.defined() ? weight.detach() : Tensor(), eps,
            rw = weight.defined() && weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             Tensor dx = empty_like_layout(x, x.shape());
             // Into the parameters' gradient buffers where offered (Note [Gradient buffers]).
             Tensor dw = rw ? new_input_grad(1, w.shape(), w.dtype(), w.device()) : Tensor();
             Tensor db = rb ? new_input_grad(2, w.shape(), w.dtype(), w.device()) : Tensor();
             const View wv = w.defined() ? w.kernel_view() : View{};
             const View dwv = rw ? dw.kernel_view() : View{};
             const View dbv = rb ? db.kernel_view() : View{};
             kernel(g.device(), &Backend::batch_norm_backward, "batch_norm_backward")(
                 dx.kernel_view_any_layout(), rw ? &dwv : nullptr, rb ? &dbv : nullptr, g.kernel_view_any_layout(),
                 x.kernel_view_any_layout(), mean.kernel_view(), var.kernel_view(),
                 w.defined() ? &wv : nullptr, eps);
             return std::vector<Tensor>{dx, dw, db};
           });
  return y;
}

}  // namespace ringflow
