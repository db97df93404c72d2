#include "ringflow/kernels/view.h"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace ringflow {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (__builtin_mul_overflow(n, s, &n)) {
      throw std::overflow_error("shape " + shape_str(shape) + " has more elements than int64 holds");
    }
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    s *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

Shape channels_last_strides(const Shape& shape) {
  if (shape.size() != 4) throw std::invalid_argument("channels-last needs a 4-D shape, got " + shape_str(shape));
  const int64_t C = std::max<int64_t>(shape[1], 1), H = std::max<int64_t>(shape[2], 1),
                W = std::max<int64_t>(shape[3], 1);
  return {H * W * C, 1, W * C, C};
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

bool View::is_dense() const {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims larger than 1
  for (int d = 0; d < dim(); ++d)
    if (shape[d] > 1) dims.emplace_back(strides[d], shape[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

}  // namespace ringflow
