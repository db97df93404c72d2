// PyTorch-like printing: tensor([[1.0000, 2.0000], ...], dtype=f64), summarised when large.
#include <cmath>
#include <cstdio>
#include <ostream>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

constexpr int64_t kSummariseAbove = 1000;  // elements
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype) {
  char buf[64];
  if (!is_floating(dtype))
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else if (std::isnan(v) || std::isinf(v))
    std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
  else if (v != 0 && (std::fabs(v) >= 1e8 || std::fabs(v) < 1e-4))
    std::snprintf(buf, sizeof buf, "%.4e", v);
  else
    std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

void print_dim(std::ostream& out, const std::vector<double>& values, const Shape& shape,
               const Shape& strides, int64_t dim, int64_t offset, bool summarise, DType dtype,
               int indent) {
  if (dim == static_cast<int64_t>(shape.size())) {
    out << format_value(values[offset], dtype);
    return;
  }
  out << '[';
  const int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
      out << "...";
      i = n - kEdgeItems - 1;
      out << (dim + 1 == static_cast<int64_t>(shape.size()) ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    print_dim(out, values, shape, strides, dim + 1, offset + i * strides[dim], summarise, dtype,
              indent + 1);
    if (i + 1 < n)
      out << (dim + 1 == static_cast<int64_t>(shape.size()) ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  out << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "tensor(undefined)";
  const std::vector<double> values = t.to_vector<double>();
  out << "tensor(";
  print_dim(out, values, t.shape(), contiguous_strides(t.shape()), 0, 0,
            t.numel() > kSummariseAbove, t.dtype(), 7);
  if (t.dtype() != DType::f32) out << ", dtype=" << dtype_name(t.dtype());
  if (!t.device().is_cpu()) out << ", device=" << t.device().str();
  if (t.requires_grad()) out << (t.is_leaf() ? ", requires_grad=true" : ", grad_fn=<" + t.grad_fn()->name() + ">");
  return out << ')';
}

std::string Tensor::str() const {
  std::ostringstream out;
  out << *this;
  return out.str();
}

}  // namespace ringflow
