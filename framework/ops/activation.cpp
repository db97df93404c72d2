// softmax / log_softmax (kernels with a backward from the output) and dropout.
// relu, sigmoid and tanh are elementwise ops (elementwise.cpp).
#include "ringflow/framework/autocast.h"
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

Tensor softmax_op(const Tensor& x_in, int64_t dim_in, bool log) {
  const Tensor x = autocast_to_f32(x_in);
  RF_CHECK(is_floating(x.dtype()), log ? "log_softmax" : "softmax", " of a ",
           dtype_name(x.dtype()), " tensor");
  const int64_t dim = wrap_dim(dim_in, x.dim());
  Tensor y = empty_like(x);
  if (y.numel() > 0)
    kernel(x.device(), &Backend::softmax_forward, "softmax_forward")(y.kernel_view(),
                                                                     x.kernel_view(), dim, log);
  if (grad_needed({x}))
    record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, y,
           [y = y.detach(), dim, log](const Tensor& g) {
             Tensor dx = empty_like(y);
             if (dx.numel() > 0)
               kernel(g.device(), &Backend::softmax_backward, "softmax_backward")(
                   dx.kernel_view(), g.kernel_view(), y.kernel_view(), dim, log);
             return std::vector<Tensor>{dx};
           });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, /*log=*/false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, /*log=*/true); }

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  RF_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, zeros_like(x));
  // mask = [u >= p] / (1 - p), drawn on the host so a seed gives the same mask everywhere.
  Tensor u = rand(x.shape(), gen, x.dtype()).to(x.device());
  Tensor mask = div(ge(u, scalar_tensor(p, x.dtype(), x.device())),
                    scalar_tensor(1.0 - p, x.dtype(), x.device()));
  return mul(x, mask);
}

}  // namespace ringflow
