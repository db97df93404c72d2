// Reductions over dims. Kernels reduce into a keepdim-shaped output; the op then drops the
// reduced dims unless keepdim.
#include <algorithm>

#include "ringflow/framework/autocast.h"
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

// Which dims of x are reduced (all when dims is empty).
std::vector<bool> reduced_mask(const Tensor& x, const Shape& dims) {
  std::vector<bool> mask(x.dim(), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim());
    if (x.dim() > 0) {
      RF_CHECK(!mask[w] || dims.empty(), "dim ", w, " appears twice in ", shape_str(dims));
      mask[w] = true;
    }
  }
  return mask;
}

Shape keepdim_shape(const Tensor& x, const std::vector<bool>& mask) {
  Shape s = x.shape();
  for (size_t i = 0; i < s.size(); ++i)
    if (mask[i]) s[i] = 1;
  return s;
}

Shape final_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  if (keepdim) return keepdim_shape(x, mask);
  Shape s;
  for (size_t i = 0; i < mask.size(); ++i)
    if (!mask[i]) s.push_back(x.shape()[i]);
  return s;
}

int64_t reduced_count(const Tensor& x, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) n *= x.shape()[i];
  return n;
}

Tensor reduce_forward(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, DType out_dtype) {
  Tensor out = empty(keepdim_shape(x, mask), out_dtype, x.device());
  if (out.numel() == 0) return out;
  if (x.numel() == 0) {
    RF_CHECK(op == ReduceOp::sum, reduce_op_name(op), " of an empty tensor of shape ",
             shape_str(x.shape()), " is undefined");
    return out.fill_(0.0);
  }
  kernel(x.device(), &Backend::reduce, reduce_op_name(op))(op, out.kernel_view(), x.kernel_view());
  return out;
}

// Gradient of sum/mean over the mask, broadcast back to x's shape.
Tensor expand_back(const Tensor& g, const Shape& keep_shape, const Shape& x_shape) {
  return g.reshape(keep_shape).expand(x_shape);
}

// amax / amin: the gradient is shared evenly between the elements equal to the extreme.
Tensor extreme(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim) {
  const auto mask = reduced_mask(x, dims);
  Tensor kept = reduce_forward(op, x, mask, x.dtype());
  Tensor out = kept.reshape(final_shape(x, mask, keepdim));
  if (grad_needed({x}))
    record(op == ReduceOp::max ? "AmaxBackward" : "AminBackward", {x}, out,
           [x = x.detach(), kept = kept.detach(), mask](const Tensor& g) {
             Tensor hit = eq(x, kept);
             Tensor count = sum(hit, [&] {
               Shape d;
               for (size_t i = 0; i < mask.size(); ++i)
                 if (mask[i]) d.push_back(static_cast<int64_t>(i));
               return d;
             }(), /*keepdim=*/true);
             return std::vector<Tensor>{mul(expand_back(g, kept.shape(), x.shape()), div(hit, count))};
           });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const Tensor x = autocast_to_f32(x_in);
  const auto mask = reduced_mask(x, dims);
  Tensor kept = reduce_forward(ReduceOp::sum, x, mask, x.dtype());
  Tensor out = kept.reshape(final_shape(x, mask, keepdim));
  if (grad_needed({x}))
    record("SumBackward", {x}, out, [keep = kept.shape(), xs = x.shape()](const Tensor& g) {
      return std::vector<Tensor>{expand_back(g, keep, xs)};
    });
  return out;
}

Tensor mean(const Tensor& x_in, const Shape& dims, bool keepdim) {
  const Tensor x = autocast_to_f32(x_in);
  const auto mask = reduced_mask(x, dims);
  RF_CHECK(is_floating(x.dtype()), "mean of an integer tensor (", dtype_name(x.dtype()),
           "); convert it with to(f32) first");
  Tensor kept = reduce_forward(ReduceOp::mean, x, mask, x.dtype());
  Tensor out = kept.reshape(final_shape(x, mask, keepdim));
  if (grad_needed({x}))
    record("MeanBackward", {x}, out,
           [keep = kept.shape(), xs = x.shape(), n = reduced_count(x, mask)](const Tensor& g) {
             return std::vector<Tensor>{div(expand_back(g, keep, xs),
                                            scalar_tensor(static_cast<double>(n), g.dtype(), g.device()))};
           });
  return out;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  // Two passes (mean, then squared deviations) for accuracy.
  const auto mask = reduced_mask(x, dims);
  const int64_t n = reduced_count(x, mask);
  Shape d;
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i]) d.push_back(static_cast<int64_t>(i));
  const double denom = static_cast<double>(std::max<int64_t>(n - correction, 0));
  Tensor dev, out;
  {
    NoGradGuard no_grad;
    dev = sub(x, mean(x, d, /*keepdim=*/true));
    out = div(sum(mul(dev, dev), d, keepdim), scalar_tensor(denom, x.dtype(), x.device()));
  }
  // PyTorch's rule, 2 (x - mean) / (n - correction): the share through the mean, zero in
  // exact arithmetic, is left out (an inf in x would make it NaN for the whole row).
  if (grad_needed({x}))
    record("VarBackward", {x}, out,
           [dev, keep = keepdim_shape(x, mask), xs = x.shape(), denom](const Tensor& g) {
             return std::vector<Tensor>{
                 mul(expand_back(g, keep, xs), mul(dev, scalar_tensor(2.0 / denom, g.dtype(), g.device())))};
           });
  return out;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return extreme(ReduceOp::max, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return extreme(ReduceOp::min, x, dims, keepdim); }
Tensor max(const Tensor& x) { return amax(x); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  RF_CHECK(x.dim() > 0, "argmax over dim ", dim, " of a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim());
  RF_CHECK(x.shape()[d] > 0, "argmax over an empty dim ", d, " of shape ", shape_str(x.shape()));
  const auto mask = reduced_mask(x, {d});
  Tensor kept = reduce_forward(ReduceOp::argmax, x.detach(), mask, DType::i64);
  return kept.reshape(final_shape(x, mask, keepdim));
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = wrap_dim(dim, x.dim());
  Tensor values = gather(x, d, argmax(x, d, /*keepdim=*/true));
  return keepdim ? values : values.squeeze(d);
}

}  // namespace ringflow
