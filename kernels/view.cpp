#include "ringflow/kernels/view.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ringflow {

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
