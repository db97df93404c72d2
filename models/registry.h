// The model registry behind apps' `--model` flag: a name -> a freshly initialised model.
//   small_cnn, mlp                                  28x28x1 inputs, 10 classes by default
//   vgg11_cifar vgg13_cifar vgg16_cifar vgg19_cifar VGG with BN, 32x32 inputs, 10 classes
//   resnet18_cifar resnet34_cifar resnet50_cifar    32x32 inputs, 10 classes
//   vgg11 vgg13 vgg16 vgg19                         torchvision's vggNN_bn, 224x224, 1000
//   resnet18 resnet34 resnet50                      torchvision's, 224x224, 1000
//   inception_v3                                    torchvision's, 299x299, 1000, aux head
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/nn/module.h"

namespace ringflow::models {

struct ModelOptions {
  Generator* gen = nullptr;  // initialisation and dropout; the default generator when null
  bool aux_logits = true;    // inception_v3's auxiliary head
  double dropout = 0.5;      // ImageNet VGG's and Inception's dropout
};

// num_classes <= 0: the model's default (10 for the 28x28 and CIFAR models, 1000 for
// ImageNet ones). Throws std::invalid_argument naming the name and every choice.
nn::ModulePtr make_model(const std::string& name, int64_t num_classes = 0,
                         const ModelOptions& options = {});
std::vector<std::string> model_names();
// (C, H, W) of the input the model is made for, e.g. (3, 32, 32) for resnet18_cifar.
std::vector<int64_t> model_input_shape(const std::string& name);

}  // namespace ringflow::models
