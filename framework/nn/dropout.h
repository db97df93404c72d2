// nn::Dropout: in training zeroes each element with probability p and scales the others by
// 1 / (1 - p); the identity in eval. Draws from `gen` (the default generator when null),
// which must outlive the module.
#pragma once

#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/random.h"

namespace ringflow::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

}  // namespace ringflow::nn
