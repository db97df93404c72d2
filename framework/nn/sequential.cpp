#include "ringflow/framework/nn/sequential.h"

#include "ringflow/framework/nn/activation.h"
#include "ringflow/framework/nn/batch_norm.h"
#include "ringflow/framework/nn/linear.h"

namespace ringflow::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (const ModulePtr& m : modules) push_back(m);
}

ModulePtr Sequential::operator[](size_t i) const {
  RF_CHECK(i < size(), "Sequential: index ", i, " out of range (size ", size(), ")");
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  const auto& children = named_children();
  Tensor h = x;
  for (size_t i = 0; i < children.size(); ++i) {
    // A batch norm or a linear layer followed by a ReLU runs as one op (forward_relu: fused
    // where the device has the kernels); the ReLU stays a child, as PyTorch's, for the names.
    const bool relu_next = i + 1 < children.size() && std::dynamic_pointer_cast<ReLU>(children[i + 1].second);
    const auto bn = std::dynamic_pointer_cast<BatchNorm2d>(children[i].second);
    const auto fc = std::dynamic_pointer_cast<Linear>(children[i].second);
    if (relu_next && (bn || fc)) {
      h = bn ? bn->forward_relu(h) : fc->forward_relu(h);
      ++i;
      continue;
    }
    h = children[i].second->forward(h);
  }
  return h;
}

}  // namespace ringflow::nn
