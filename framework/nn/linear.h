// nn::Linear: y = x @ weight^T + bias, weight (out, in), bias (out) unless bias = false;
// PyTorch's default initialisation (init::default_layer_init).
#pragma once

#include "ringflow/framework/nn/module.h"

namespace ringflow::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // x (..., in) -> (..., out)
  Tensor forward_relu(const Tensor& x);     // relu(forward(x)) as one op (ops.h's linear_relu)
  void reset_parameters(Generator* gen = nullptr);
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight, bias;

 private:
  int64_t in_features_, out_features_;
};

}  // namespace ringflow::nn
