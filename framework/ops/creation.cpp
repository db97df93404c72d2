// Creation ops: allocation, constants, ranges and random tensors.
#include <cmath>
#include <stdexcept>

#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

Tensor allocate(const Shape& shape, Shape strides, DType dtype, Device device) {
  for (int64_t s : shape) RF_CHECK(s >= 0, "negative size in shape ", shape_str(shape));
  // A product that wraps around would allocate a few bytes for a huge tensor.
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &nbytes))
    throw std::overflow_error(cat("a tensor of shape ", shape_str(shape), " and dtype ", dtype_name(dtype),
                                  " has more bytes than int64 holds"));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), device);
  impl->shape = shape;
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// Random values are drawn on the host in a fixed order, so a seed gives the same tensor
// on every device.
Tensor from_host_values(const std::vector<double>& values, const Shape& shape, DType dtype,
                        Device device) {
  Tensor host = empty(shape, DType::f64);
  std::copy(values.begin(), values.end(), host.data<double>());
  return host.to(dtype).to(device);
}

}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, contiguous_strides(shape), dtype, device);
}

Tensor empty_channels_last(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, channels_last_strides(shape), dtype, device);
}

Tensor empty_like(const Tensor& t) {
  if (t.dim() == 4 && t.is_channels_last() && !t.is_contiguous())
    return empty_channels_last(t.shape(), t.dtype(), t.device());
  return empty(t.shape(), t.dtype(), t.device());
}

Tensor empty_blocked(const Shape& shape, MemoryLayout layout, DType dtype, Device device) {
  if (layout == MemoryLayout::strided) return empty(shape, dtype, device);
  RF_CHECK(shape.size() == 4 && shape[1] % channel_block(layout) == 0, "the blocked layout ",
           memory_layout_name(layout), " needs a 4-D (N, C, H, W) shape whose C is a multiple of ",
           channel_block(layout), ", got ", shape_str(shape));
  Tensor t = empty(shape, dtype, device);
  t.impl()->layout = layout;
  return t;
}

ActivationLayout::ActivationLayout(const Tensor& t)
    : blocked(t.kernel_layout()), channels_last(t.is_channels_last() && !t.is_contiguous()) {}

Tensor ActivationLayout::empty(const Shape& shape, DType dtype, Device device) const {
  if (blocked != MemoryLayout::strided) return empty_blocked(shape, blocked, dtype, device);
  if (shape.size() == 4 && channels_last) return empty_channels_last(shape, dtype, device);
  return ringflow::empty(shape, dtype, device);
}

Tensor empty_like_layout(const Tensor& like, const Shape& shape) {
  return ActivationLayout(like).empty(shape, like.dtype(), like.device());
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor zeros_like(const Tensor& t) { return empty_like(t).fill_(0.0); }
Tensor ones_like(const Tensor& t) { return empty_like(t).fill_(1.0); }

Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  RF_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end),
           "arange: bad range [", start, ", ", end, ") step ", step);
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return from_host_values(values, {n}, dtype, device);
}

Tensor arange(int64_t end, DType dtype) { return arange(0.0, static_cast<double>(end), 1.0, dtype); }

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                   Device device) {
  RF_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
           values.size(), " values for shape ", shape_str(shape));
  return from_host_values(values, shape, dtype, device);
}

Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype, Device device,
                 std::function<void()> release) {
  RF_CHECK(strides.empty() || strides.size() == shape.size(), "from_blob: ", strides.size(),
           " strides for the ", shape.size(), " dims of shape ", shape_str(shape));
  const Shape s = strides.empty() ? contiguous_strides(shape) : strides;
  int64_t extent = 1;  // elements from the first to one past the last
  for (size_t d = 0; d < shape.size(); ++d) {
    RF_CHECK(shape[d] >= 0 && s[d] >= 0, "from_blob: shape ", shape_str(shape), " with strides ",
             shape_str(s), ": sizes and strides must not be negative");
    if (shape[d] == 0) extent = 0;
  }
  for (size_t d = 0; d < shape.size() && extent > 0; ++d) extent += (shape[d] - 1) * s[d];
  RF_CHECK(data || extent == 0, "from_blob: a null pointer for shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(extent) * dtype_size(dtype),
                                            device, std::move(release));
  impl->shape = shape;
  impl->strides = s;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

template <class T>
Tensor from_data(const T* values, const Shape& shape, Device device) {
  Tensor host = empty(shape, dtype_of<T>());
  std::copy(values, values + host.numel(), host.data<T>());
  return host.to(device);
}
template Tensor from_data<float>(const float*, const Shape&, Device);
template Tensor from_data<double>(const double*, const Shape&, Device);
template Tensor from_data<int32_t>(const int32_t*, const Shape&, Device);
template Tensor from_data<int64_t>(const int64_t*, const Shape&, Device);
template Tensor from_data<Half>(const Half*, const Shape&, Device);
template Tensor from_data<BFloat16>(const BFloat16*, const Shape&, Device);

Tensor rand(const Shape& shape, Generator* gen, DType dtype, double low, double high) {
  Generator& g = gen ? *gen : default_generator();
  std::vector<double> values(shape_numel(shape));
  for (double& v : values) v = low + (high - low) * g.uniform();
  return from_host_values(values, shape, dtype, Device::cpu());
}

Tensor randn(const Shape& shape, Generator* gen, DType dtype, double mean, double std) {
  Generator& g = gen ? *gen : default_generator();
  std::vector<double> values(shape_numel(shape));
  for (double& v : values) v = mean + std * g.normal();
  return from_host_values(values, shape, dtype, Device::cpu());
}

}  // namespace ringflow
