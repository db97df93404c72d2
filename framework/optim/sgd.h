// Stochastic gradient descent with momentum, dampening, Nesterov momentum and (coupled)
// weight decay: exactly torch.optim.SGD's rule, per parameter p with gradient g:
//   d = g + weight_decay * p
//   buf = d (first step: a copy, undampened)  |  buf = momentum * buf + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf        (when momentum != 0)
//   p -= lr * d
// State: "momentum_buffer" per parameter when momentum != 0.
#pragma once

#include "ringflow/framework/optim/optimizer.h"

namespace ringflow::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0, as in PyTorch
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  void step() override;
  bool step(const GradScaling& scaling) override;
  std::vector<std::string> state_keys() const override;
  const SGDOptions& options() const { return options_; }

 private:
  SGDOptions options_;
  bool update(const GradScaling* scaling);  // both steps; false: skipped by the loss scale's flag
};

}  // namespace ringflow::optim
