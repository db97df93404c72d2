// VGG with batch norm. Two variants:
// - cifar: kuangliu/pytorch-cifar's VGG: `features` (3x3 conv(bias) + BN + ReLU per config
//   entry, 2x2 max-pools, a final AvgPool2d(1, 1)), then `classifier` = Linear(512, C);
//   PyTorch's default initialisation. Input (N, 3, 32, 32).
// - imagenet: torchvision's vgg11_bn ... vgg19_bn: `features`, `avgpool`
//   (AdaptiveAvgPool2d(7, 7)), `classifier` = Linear(512*7*7, 4096) ReLU Dropout
//   Linear(4096, 4096) ReLU Dropout Linear(4096, C); torchvision's initialisation (conv
//   kaiming-normal fan-out, linear N(0, 0.01), biases 0). Input (N, 3, 224, 224).
#pragma once

#include <memory>
#include <vector>

#include "ringflow/framework/nn/nn.h"

namespace ringflow::models {

enum class Variant { cifar, imagenet };

// Channels per conv layer, 0 = max-pool (torchvision's cfgs A, B, D, E); depth 11/13/16/19.
std::vector<int64_t> vgg_config(int depth);

class Vgg : public nn::Module {
 public:
  Vgg(int depth, Variant variant, int64_t num_classes, Generator* gen = nullptr,
      double dropout = 0.5);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, C)

  std::shared_ptr<nn::Sequential> features;
  nn::ModulePtr classifier;  // cifar: a Linear; imagenet: a Sequential
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;  // imagenet only

 private:
  Variant variant_;
};

}  // namespace ringflow::models
