// ResNet-18/34 (BasicBlock) and ResNet-50 (Bottleneck, stride on the 3x3 conv: "v1.5").
// - imagenet: torchvision's resnet18/34/50, same module names (`conv1`, `bn1`, `layer1.0.conv1`,
//   `layer2.0.downsample.0`, `fc`) and initialisation (conv kaiming-normal fan-out; BN 1, 0).
//   7x7 stride-2 stem, 3x3 stride-2 max-pool. Input (N, 3, 224, 224).
// - cifar: kuangliu/pytorch-cifar's ResNet: 3x3 stride-1 stem, no max-pool, projection
//   shortcuts named `shortcut.0`/`shortcut.1`, classifier `linear`; PyTorch's default init.
//   Input (N, 3, 32, 32).
#pragma once

#include <memory>

#include "ringflow/framework/nn/nn.h"
#include "ringflow/models/vgg.h"  // Variant

namespace ringflow::models {

class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Variant variant, Generator* gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> shortcut;  // null or empty: identity
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Variant variant, Generator* gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::Sequential> shortcut;
};

class ResNet : public nn::Module {
 public:
  // depth 18, 34 or 50.
  ResNet(int depth, Variant variant, int64_t num_classes, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // (N, 3, H, W) -> (N, C)

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::MaxPool2d> maxpool;  // imagenet only
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;  // `fc` (imagenet) or `linear` (cifar)

 private:
  Variant variant_;
};

}  // namespace ringflow::models
