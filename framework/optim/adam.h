// Adam (Kingma & Ba) and AdamW (Loshchilov & Hutter): torch.optim.Adam / AdamW's rules
// (PyTorch 1.13, amsgrad=False), per parameter p with gradient g at step t = 1, 2, ...:
//   Adam:  g = g + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// eps is added after the bias correction of sqrt(v), as in PyTorch.
// State: "step" (0-d f64 on the cpu), "exp_avg" (m), "exp_avg_sq" (v).
#pragma once

#include "ringflow/framework/optim/optimizer.h"

namespace ringflow::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: added to the gradient; AdamW: decoupled
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  void step() override;
  bool step(const GradScaling& scaling) override;
  std::vector<std::string> state_keys() const override;
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled);

 private:
  AdamOptions options_;
  bool decoupled_;  // AdamW
  AdamStep constants(double t) const;  // the step's constants at step count t
  bool update(const GradScaling* scaling);  // both steps; false: skipped by the loss scale's flag
};

// Adam with decoupled weight decay; PyTorch's default weight_decay for AdamW is 1e-2.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamOptions& options);
};

}  // namespace ringflow::optim
