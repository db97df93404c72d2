// nn::Flatten: merges dims start_dim..end_dim (PyTorch's defaults 1 and -1: (N, ...) -> (N, -1)).
#pragma once

#include "ringflow/framework/nn/module.h"

namespace ringflow::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace ringflow::nn
