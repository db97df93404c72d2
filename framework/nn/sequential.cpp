#include "ringflow/framework/nn/sequential.h"

namespace ringflow::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (const ModulePtr& m : modules) push_back(m);
}

ModulePtr Sequential::operator[](size_t i) const {
  RF_CHECK(i < size(), "Sequential: index ", i, " out of range (size ", size(), ")");
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, m] : named_children()) h = m->forward(h);
  return h;
}

}  // namespace ringflow::nn
