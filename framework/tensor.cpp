#include "ringflow/framework/tensor.h"

#include <algorithm>
#include <numeric>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"
#include "ringflow/kernels/cuda_copy.h"

namespace ringflow {

// ---------------------------------------------------------------- shape helpers

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  RF_CHECK(dim >= lo && dim <= hi, "dimension ", dim, " is out of range for a tensor of rank ",
           ndim, " (expected ", lo, "..", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape,
                  Shape* new_strides) {
  // PyTorch's computeStride: walk chunks of old dims that are contiguous with each other
  // and split each chunk into the new dims of the same element count.
  new_strides->assign(new_shape.size(), 0);
  if (shape.empty() || shape_numel(shape) == 0) {
    *new_strides = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        (*new_strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

namespace {

// A new handle on base's storage, in base's layout.
Tensor share_storage(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->layout = base.layout();
  return Tensor(std::move(impl));
}

// A strided view of a strided base (its callers read base.strides(), which converts).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  RF_CHECK(base.layout() == MemoryLayout::strided, "a view of a tensor in the blocked layout ",
           memory_layout_name(base.layout()), " (an internal error: strides() converts it first)");
  return share_storage(base, std::move(shape), std::move(strides), offset);
}

Shape infer_size(const Shape& shape, int64_t numel) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      RF_CHECK(infer < 0, "only one dimension can be -1 in shape ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      RF_CHECK(out[i] >= 0, "invalid size ", out[i], " in shape ", shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    RF_CHECK(known != 0 && numel % known == 0, "shape ", shape_str(shape),
             " is invalid for a tensor of ", numel, " elements");
    out[infer] = numel / known;
  }
  RF_CHECK(shape_numel(out) == numel, "shape ", shape_str(shape), " is invalid for a tensor of ",
           numel, " elements");
  return out;
}

void check_inplace_allowed(const Tensor& t, const char* op) {
  RF_CHECK(!(grad_mode_enabled() && t.requires_grad()), op,
           ": in-place change of a tensor that requires grad (shape ", shape_str(t.shape()),
           "); do it under NoGradGuard, as an optimizer step does");
}

}  // namespace

// ---------------------------------------------------------------- metadata

TensorImpl& Tensor::checked() const {
  if (!impl_) throw std::invalid_argument("operation on an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t dim) const { return shape()[wrap_dim(dim, this->dim())]; }
int64_t Tensor::numel() const { return shape_numel(shape()); }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked();
  return t.layout == MemoryLayout::strided && contiguous_layout(t.shape, t.strides);
}
bool Tensor::is_channels_last() const {
  const TensorImpl& t = checked();
  return t.layout == MemoryLayout::strided && channels_last_layout(t.shape, t.strides);
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && storage() == other.storage();
}

namespace {

// What a kernel sees of t's memory, in t's layout.
View view_of(const TensorImpl& t) {
  View v;
  v.data = static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype);
  v.dtype = t.dtype;
  v.shape = t.shape;
  v.strides = t.strides;
  v.layout = t.layout;
  v.derived = t.storage->shared() ? nullptr : &t.storage->derived();
  v.version = t.storage->version();
  return v;
}

}  // namespace

TensorImpl& Tensor::strided_impl() const {
  TensorImpl& t = checked();
  if (t.layout == MemoryLayout::strided) return t;
  auto plain = std::make_shared<Storage>(t.storage->nbytes(), t.storage->device());
  const View from = view_of(t);
  View to = from;
  to.data = plain->data();
  to.layout = MemoryLayout::strided;
  to.derived = nullptr;
  // The device's own table: under a KernelTableGuard the kernels may know no blocked layout.
  device_backend(plain->device()).copy(to, from);
  t.storage = std::move(plain);
  t.layout = MemoryLayout::strided;
  return t;
}

View Tensor::kernel_view() const { return view_of(strided_impl()); }

MemoryLayout Tensor::kernel_layout() const {
  const TensorImpl& t = checked();
  return t.layout != MemoryLayout::strided && kernel_backend(device()).blocked_layout ? t.layout : MemoryLayout::strided;
}

View Tensor::kernel_view_any_layout() const {
  if (kernel_layout() == MemoryLayout::strided) return kernel_view();
  return view_of(checked());
}

void* Tensor::raw_data() const {
  const TensorImpl& t = strided_impl();
  return static_cast<char*>(t.storage->data()) + t.offset * dtype_size(t.dtype);
}

void Tensor::check_access(DType expected) const {
  RF_CHECK(dtype() == expected, "data<", dtype_name(expected), ">() on a tensor of dtype ",
           dtype_name(dtype()));
  RF_CHECK(device().is_cpu(), "data<T>() on a tensor on ", device().str(),
           "; copy it to the cpu first");
}

double Tensor::item() const {
  RF_CHECK(numel() == 1, "item() needs a one-element tensor, got shape ", shape_str(shape()));
  Tensor host = to(Device::cpu()).to(DType::f64).contiguous();
  return *host.data<double>();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

// ---------------------------------------------------------------- views

Tensor Tensor::view(const Shape& new_shape_in) const {
  const Shape new_shape = infer_size(new_shape_in, numel());
  Shape new_strides;
  RF_CHECK(view_strides(shape(), strides(), new_shape, &new_strides), "view: a tensor of shape ",
           shape_str(shape()), " and strides ", shape_str(strides()),
           " cannot be viewed as ", shape_str(new_shape), "; use reshape()");
  Tensor out = make_view(*this, new_shape, new_strides, offset());
  if (grad_needed({*this}))
    record("ViewBackward", {*this}, out,
           [in_shape = shape()](const Tensor& g) { return std::vector<Tensor>{g.reshape(in_shape)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& new_shape_in) const {
  const Shape new_shape = infer_size(new_shape_in, numel());
  Shape new_strides;
  if (view_strides(shape(), strides(), new_shape, &new_strides)) return view(new_shape);
  return contiguous().view(new_shape);
}

Tensor Tensor::permute(const Shape& dims) const {
  RF_CHECK(static_cast<int>(dims.size()) == dim(), "permute: ", dims.size(),
           " dims given for a tensor of rank ", dim());
  Shape new_shape(dims.size()), new_strides(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim());
    RF_CHECK(!used[d], "permute: dim ", d, " repeated in ", shape_str(dims));
    used[d] = true;
    new_shape[i] = shape()[d];
    new_strides[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = make_view(*this, new_shape, new_strides, offset());
  if (grad_needed({*this}))
    record("PermuteBackward", {*this}, out,
           [inverse](const Tensor& g) { return std::vector<Tensor>{g.permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Shape dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(dim0, dim())], dims[wrap_dim(dim1, dim())]);
  return permute(dims);
}

Tensor Tensor::t() const {
  RF_CHECK(dim() == 2, "t() needs a 2-D tensor, got shape ", shape_str(shape()));
  return transpose(0, 1);
}

Tensor Tensor::narrow(int64_t dim_in, int64_t start, int64_t length) const {
  return slice(dim_in, start, start + length);
}

Tensor Tensor::slice(int64_t dim_in, int64_t start, int64_t end, int64_t step) const {
  const int64_t d = wrap_dim(dim_in, dim());
  const int64_t n = shape()[d];
  RF_CHECK(step > 0, "slice: step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  RF_CHECK(start >= 0 && start <= end && end <= n, "slice [", start, ", ", end,
           ") is out of range for dim ", d, " of size ", n, " (shape ", shape_str(shape()), ")");
  Shape new_shape = shape(), new_strides = strides();
  new_shape[d] = (end - start + step - 1) / step;
  new_strides[d] *= step;
  Tensor out = make_view(*this, new_shape, new_strides, offset() + start * strides()[d]);
  if (grad_needed({*this}))
    record("SliceBackward", {*this}, out, [in = detach(), d, start, end, step](const Tensor& g) {
      Tensor dx = zeros(in.shape(), g.dtype(), g.device());
      dx.slice(d, start, end, step).copy_(g);
      return std::vector<Tensor>{dx};
    });
  return out;
}

Tensor Tensor::select(int64_t dim_in, int64_t index) const {
  const int64_t d = wrap_dim(dim_in, dim());
  if (index < 0) index += shape()[d];
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& target) const {
  RF_CHECK(target.size() >= shape().size(), "expand: shape ", shape_str(shape()),
           " has more dims than the target ", shape_str(target));
  const size_t lead = target.size() - shape().size();
  Shape new_shape(target.size()), new_strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      RF_CHECK(target[i] >= 0, "expand: size -1 not allowed in a new leading dim of ",
               shape_str(target));
      new_shape[i] = target[i];
      continue;
    }
    const int64_t own = shape()[i - lead];
    const int64_t want = target[i] == -1 ? own : target[i];
    RF_CHECK(own == want || own == 1, "expand: shape ", shape_str(shape()),
             " cannot be expanded to ", shape_str(target));
    new_shape[i] = want;
    new_strides[i] = own == want ? strides()[i - lead] : 0;
  }
  Tensor out = make_view(*this, new_shape, new_strides, offset());
  if (grad_needed({*this}))
    record("ExpandBackward", {*this}, out, [in_shape = shape()](const Tensor& g) {
      return std::vector<Tensor>{sum_to(g, in_shape)};
    });
  return out;
}

Tensor Tensor::squeeze(int64_t dim_in) const {
  const int64_t d = wrap_dim(dim_in, dim());
  if (shape()[d] != 1) return *this;
  Shape s = shape();
  s.erase(s.begin() + d);
  return view(s);
}

Tensor Tensor::unsqueeze(int64_t dim_in) const {
  const int64_t d = wrap_dim(dim_in, dim() + 1);
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim()), e = wrap_dim(end_dim, dim());
  RF_CHECK(s <= e, "flatten: start_dim ", s, " after end_dim ", e);
  Shape out(shape().begin(), shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= shape()[d];
  out.push_back(n);
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return reshape(out);
}

// ---------------------------------------------------------------- copies

namespace {

// A differentiable copy into `out` (already allocated, same shape). The gradient goes back
// in src's dtype, on its device, and, for a dense src, in its layout (one kernel): a
// parameter's gradient keeps the parameter's layout whatever its copies' (PyTorch's
// gradient layout contract), so that the optimizer's fused step takes it, and lands in its
// gradient buffer where offered (Note [Gradient buffers]: an autocast cast's backward).
Tensor copy_into(const Tensor& src, Tensor out, const char* name) {
  {
    NoGradGuard no_grad;
    out.copy_(src);
  }
  if (grad_needed({src}))
    record(name, {src}, out, [dtype = src.dtype(), device = src.device(), contiguous = src.is_contiguous(),
                              cl = src.is_channels_last() && !src.is_contiguous()](const Tensor& g) {
      if (g.device() != device || (!contiguous && !cl)) return std::vector<Tensor>{g.to(dtype).to(device)};
      if (g.dtype() == dtype && (contiguous ? g.is_contiguous() : g.is_channels_last())) return std::vector<Tensor>{g};
      Tensor r = cl ? empty_channels_last(g.shape(), dtype, device) : new_input_grad(0, g.shape(), dtype, device);
      NoGradGuard no_grad;
      r.copy_(g);
      return std::vector<Tensor>{r};
    });
  return out;
}

}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return copy_into(*this, empty(shape(), dtype(), device()), "ContiguousBackward");
}

Tensor Tensor::channels_last() const {
  if (is_channels_last()) return *this;
  return copy_into(*this, empty_channels_last(shape(), dtype(), device()), "ChannelsLastBackward");
}

Tensor Tensor::clone() const { return copy_into(*this, empty_like(*this), "CloneBackward"); }

Tensor Tensor::to(DType new_dtype) const {
  if (new_dtype == dtype()) return *this;
  Tensor out = is_channels_last() ? empty_channels_last(shape(), new_dtype, device())
                                  : empty(shape(), new_dtype, device());
  return copy_into(*this, out, "ToDtypeBackward");
}

Tensor Tensor::to(DType new_dtype, bool channels_last) const {
  const bool cl = channels_last && dim() == 4;
  if (new_dtype == dtype() && (cl ? is_channels_last() : is_contiguous())) return *this;
  Tensor out = cl ? empty_channels_last(shape(), new_dtype, device()) : empty(shape(), new_dtype, device());
  return copy_into(*this, out, "ToDtypeBackward");
}

Tensor Tensor::to(Device new_device) const {
  if (new_device == device()) return *this;
  return copy_into(*this, empty(shape(), dtype(), new_device), "ToDeviceBackward");
}

// ---------------------------------------------------------------- in place

namespace {

// [first, last] bytes that a view touches (strides are never negative).
std::pair<const char*, const char*> byte_span(const View& v) {
  const char* first = static_cast<const char*>(v.data);
  int64_t last = 0;
  for (int d = 0; d < v.dim(); ++d) last += (v.shape[d] - 1) * v.strides[d];
  return {first, first + (last + 1) * static_cast<int64_t>(dtype_size(v.dtype)) - 1};
}

// A copy whose destination repeats an element, or whose dense source and destination share
// memory without being the same view, would read elements it has already overwritten (in
// an order that differs between backends): refused, as PyTorch does. Views with gaps
// (x[:, 0] and x[:, 1]) may interleave without sharing an element: allowed, as there.
void check_copy_overlap(const Tensor& dst, const Tensor& src) {
  const View d = dst.kernel_view();
  for (int i = 0; i < d.dim(); ++i)
    RF_CHECK(d.shape[i] <= 1 || d.strides[i] != 0, "copy_: more than one element of the "
             "destination ", shape_str(d.shape), " refers to a single memory location (stride 0 "
             "in dim ", i, "); copy into a contiguous tensor");
  if (src.storage() != dst.storage()) return;
  const View s = src.kernel_view();
  if (s.data == d.data && s.strides == d.strides && s.dtype == d.dtype) return;  // the same view
  if (!d.is_dense() || !s.is_dense()) return;
  const auto [d0, d1] = byte_span(d);
  const auto [s0, s1] = byte_span(s);
  RF_CHECK(d1 < s0 || s1 < d0, "copy_: source ", shape_str(s.shape), " and destination ",
           shape_str(d.shape), " overlap in memory; copy from src.clone() instead");
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in) {
  check_inplace_allowed(*this, "copy_");
  Tensor src = src_in.shape() == shape() ? src_in : src_in.detach().expand(shape());
  if (numel() > 0) check_copy_overlap(*this, src);
  if (src.device() == device()) {
    if (numel() > 0) kernel(device(), &Backend::copy, "copy")(kernel_view(), src.kernel_view());
  } else {
    copy_between_devices(kernel_view(), device(), src.kernel_view(), src.device());
  }
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed(*this, "fill_");
  if (numel() > 0) kernel(device(), &Backend::fill, "fill")(kernel_view(), value);
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace_allowed(*this, "add_");
  RF_CHECK(other.dtype() == dtype(), "add_: dtype ", dtype_name(other.dtype()), " into ",
           dtype_name(dtype()));
  Tensor o = other.detach();
  if (alpha != 1.0) o = mul(o, scalar_tensor(alpha, dtype(), device()));
  RF_CHECK(broadcast_shapes(shape(), o.shape()) == shape(), "add_: shape ",
           shape_str(other.shape()), " cannot be added into ", shape_str(shape()));
  const View out = kernel_view();
  kernel(device(), &Backend::binary, "add")(BinaryOp::add, out, out,
                                            o.expand(shape()).kernel_view());
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::mul_(double factor) {
  check_inplace_allowed(*this, "mul_");
  const View out = kernel_view();
  Tensor f = scalar_tensor(factor, dtype(), device()).expand(shape());
  kernel(device(), &Backend::binary, "mul")(BinaryOp::mul, out, out, f.kernel_view());
  storage()->bump_version();
  return *this;
}

// ---------------------------------------------------------------- autograd

bool Tensor::requires_grad() const {
  const TensorImpl& t = checked();
  return t.autograd && t.autograd->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  RF_CHECK(is_leaf(), "requires_grad_ can only be set on leaf tensors (this one was produced by ",
           "an op); use detach() first");
  RF_CHECK(!on || is_floating(dtype()), "only floating-point tensors can require grad, got ",
           dtype_name(dtype()));
  checked().meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const TensorImpl& t = checked();
  return !t.autograd || !t.autograd->grad_fn;
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  const TensorImpl& t = checked();
  return t.autograd ? t.autograd->grad_fn : none;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = checked();
  return t.autograd && t.autograd->grad ? *t.autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    RF_CHECK(grad.shape() == shape(), "set_grad: gradient of shape ", shape_str(grad.shape()),
             " for a tensor of shape ", shape_str(shape()));
    // The optimizers and the DDP reducer read a gradient as its parameter's dtype and device.
    RF_CHECK(grad.dtype() == dtype() && grad.device() == device(), "set_grad: a ", dtype_name(grad.dtype()),
             " gradient on ", grad.device().str(), " for a ", dtype_name(dtype()), " tensor on ",
             device().str(), " (convert it first with to())");
  }
  checked().meta().grad = grad.defined() ? std::make_shared<Tensor>(grad) : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  ringflow::backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked();
  return share_storage(*this, t.shape, t.strides, t.offset);  // blocked or not, as it is
}

void Tensor::register_post_accumulate_grad_hook(GradHook hook) const {
  RF_CHECK(is_leaf() && requires_grad(),
           "post-accumulate-grad hooks can only be registered on leaves that require grad");
  checked().meta().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace ringflow
