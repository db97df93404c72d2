// Activation layers (no parameters).
#pragma once

#include "ringflow/framework/nn/module.h"

namespace ringflow::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace ringflow::nn
