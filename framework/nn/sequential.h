// nn::Sequential: children named "0", "1", ... (as PyTorch's, so that keys read
// `features.0.weight`), applied in order.
#pragma once

#include <initializer_list>

#include "ringflow/framework/nn/module.h"

namespace ringflow::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  // Appends a module under the next index; returns it.
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    add_child(std::to_string(size()), module);
    return module;
  }
  size_t size() const { return named_children().size(); }
  ModulePtr operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;
};

}  // namespace ringflow::nn
