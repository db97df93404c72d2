// gather along a dim, with scatter_add as its gradient.
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

void check_index(const Tensor& x, int64_t dim, const Tensor& index) {
  RF_CHECK(index.dtype() == DType::i64, "gather: index must be i64, got ", dtype_name(index.dtype()));
  RF_CHECK(index.dim() == x.dim(), "gather: index of shape ", shape_str(index.shape()),
           " and input of shape ", shape_str(x.shape()), " must have the same rank");
  for (int64_t d = 0; d < x.dim(); ++d)
    RF_CHECK(d == dim || index.shape()[d] <= x.shape()[d], "gather: index of shape ",
             shape_str(index.shape()), " is larger than input of shape ", shape_str(x.shape()),
             " in dim ", d);
  RF_CHECK(index.device() == x.device(), "gather: index on ", index.device().str(),
           " and input on ", x.device().str());
  if (index.device().is_cpu() && index.numel() > 0) {
    const Tensor lo = amin(index), hi = amax(index);
    RF_CHECK(lo.item() >= 0 && hi.item() < static_cast<double>(x.shape()[dim]),
             "gather: index values must be in [0, ", x.shape()[dim], ") for dim ", dim,
             " of shape ", shape_str(x.shape()), ", found [", lo.item(), ", ", hi.item(), "]");
  }
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  const int64_t dim = wrap_dim(dim_in, x.dim());
  check_index(x, dim, index);
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  if (out.numel() > 0)
    kernel(x.device(), &Backend::gather, "gather")(out.kernel_view(), x.kernel_view(), dim,
                                                    index.kernel_view());
  if (grad_needed({x}))
    record("GatherBackward", {x}, out,
           [xs = x.shape(), dim, index = index.detach()](const Tensor& g) {
             Tensor dx = zeros(xs, g.dtype(), g.device());
             if (g.numel() > 0)
               kernel(g.device(), &Backend::scatter_add, "scatter_add")(
                   dx.kernel_view(), dim, index.kernel_view(), g.kernel_view());
             return std::vector<Tensor>{dx};
           });
  return out;
}

}  // namespace ringflow
