// Networks for 28x28x1 images (Fashion-MNIST): the small CNN of the demo and an MLP.
#pragma once

#include <memory>

#include "ringflow/framework/nn/nn.h"

namespace ringflow::models {

// conv(1->16, 3x3, pad 1) bn relu maxpool2, conv(16->32) bn relu maxpool2, linear(32*7*7 -> C).
// Keys: conv1, bn1, conv2, bn2, fc.
class SmallCnn : public nn::Module {
 public:
  explicit SmallCnn(int64_t num_classes = 10, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // x (N, 1, 28, 28) -> (N, C)

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> fc;
};

// flatten, linear(784 -> 256) relu, linear(256 -> 128) relu, linear(128 -> C).
// Keys: fc1, fc2, fc3.
class Mlp : public nn::Module {
 public:
  explicit Mlp(int64_t num_classes = 10, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // x (N, 1, 28, 28) or (N, 784) -> (N, C)

  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
};

}  // namespace ringflow::models
