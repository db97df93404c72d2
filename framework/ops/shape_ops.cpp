// Shape ops that make new tensors: cat and the functional flatten.
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_in) {
  RF_CHECK(!tensors.empty(), "cat: no tensors given");
  const Tensor& first = tensors[0];
  const int64_t dim = wrap_dim(dim_in, first.dim());
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    RF_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype() && t.device() == first.device(),
             "cat: tensor ", i, " (", dtype_name(t.dtype()), " ", shape_str(t.shape()), " on ",
             t.device().str(), ") does not match tensor 0 (", dtype_name(first.dtype()), " ",
             shape_str(first.shape()), " on ", first.device().str(), ")");
    for (int64_t d = 0; d < first.dim(); ++d)
      RF_CHECK(d == dim || t.shape()[d] == first.shape()[d], "cat: tensor ", i, " has shape ",
               shape_str(t.shape()), " but tensor 0 has ", shape_str(first.shape()),
               " (they may differ only in dim ", dim, ")");
    out_shape[dim] += t.shape()[dim];
  }
  Tensor out = empty(out_shape, first.dtype(), first.device());
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      out.narrow(dim, offset, t.shape()[dim]).copy_(t);
      offset += t.shape()[dim];
    }
  }
  if (grad_needed(tensors)) {
    std::vector<int64_t> sizes;
    for (const Tensor& t : tensors) sizes.push_back(t.shape()[dim]);
    record("CatBackward", tensors, out, [sizes, dim](const Tensor& g) {
      std::vector<Tensor> grads;
      int64_t offset = 0;
      for (int64_t s : sizes) {
        grads.push_back(g.narrow(dim, offset, s));
        offset += s;
      }
      return grads;
    });
  }
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return x.flatten(start_dim, end_dim);
}

}  // namespace ringflow
