#include "ringflow/models/resnet.h"

namespace ringflow::models {

using namespace nn;

namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, Generator* gen) {
  return std::make_shared<Conv2d>(in, out, k, stride, /*padding=*/k / 2, /*bias=*/false, gen);
}

// The projection shortcut when the shape changes: 1x1 conv (stride) + BN.
std::shared_ptr<Sequential> projection(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  auto s = std::make_shared<Sequential>();
  s->push_back(conv(in, out, 1, stride, gen));
  s->push_back(std::make_shared<BatchNorm2d>(out));
  return s;
}

const char* shortcut_name(Variant v) { return v == Variant::cifar ? "shortcut" : "downsample"; }

}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Variant variant,
                       Generator* gen)
    : Module("BasicBlock") {
  conv1 = register_module("conv1", conv(in_planes, planes, 3, stride, gen));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1, gen));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (stride != 1 || in_planes != planes * expansion)
    shortcut = register_module(shortcut_name(variant),
                               projection(in_planes, planes * expansion, stride, gen));
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor h = bn1->forward_relu(conv1->forward(x));
  return bn2->forward_relu(conv2->forward(h), shortcut ? shortcut->forward(x) : x);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Variant variant,
                       Generator* gen)
    : Module("Bottleneck") {
  conv1 = register_module("conv1", conv(in_planes, planes, 1, 1, gen));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride, gen));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv(planes, planes * expansion, 1, 1, gen));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(planes * expansion));
  if (stride != 1 || in_planes != planes * expansion)
    shortcut = register_module(shortcut_name(variant),
                               projection(in_planes, planes * expansion, stride, gen));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor h = bn1->forward_relu(conv1->forward(x));
  h = bn2->forward_relu(conv2->forward(h));
  return bn3->forward_relu(conv3->forward(h), shortcut ? shortcut->forward(x) : x);
}

ResNet::ResNet(int depth, Variant variant, int64_t num_classes, Generator* gen)
    : Module("ResNet"), variant_(variant) {
  std::array<int, 4> blocks{};
  bool bottleneck = false;
  switch (depth) {
    case 18: blocks = {2, 2, 2, 2}; break;
    case 34: blocks = {3, 4, 6, 3}; break;
    case 50: blocks = {3, 4, 6, 3}; bottleneck = true; break;
    default: throw std::invalid_argument(cat("ResNet: no depth ", depth, " (18, 34, 50)"));
  }
  if (variant == Variant::cifar) {
    conv1 = register_module("conv1", conv(3, 64, 3, 1, gen));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  } else {
    conv1 = register_module(
        "conv1", std::make_shared<Conv2d>(3, 64, 7, 2, 3, /*bias=*/false, gen));
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(64));
    register_module("relu", std::make_shared<ReLU>());
    maxpool = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  }
  const int64_t expansion = bottleneck ? Bottleneck::expansion : BasicBlock::expansion;
  int64_t in_planes = 64;
  std::array<std::shared_ptr<Sequential>*, 4> layers = {&layer1, &layer2, &layer3, &layer4};
  for (int l = 0; l < 4; ++l) {
    const int64_t planes = int64_t{64} << l;
    auto layer = std::make_shared<Sequential>();
    for (int b = 0; b < blocks[l]; ++b) {
      const int64_t stride = (b == 0 && l > 0) ? 2 : 1;
      if (bottleneck)
        layer->push_back(std::make_shared<Bottleneck>(in_planes, planes, stride, variant, gen));
      else
        layer->push_back(std::make_shared<BasicBlock>(in_planes, planes, stride, variant, gen));
      in_planes = planes * expansion;
    }
    *layers[l] = register_module("layer" + std::to_string(l + 1), layer);
  }
  if (variant == Variant::imagenet)
    avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  else
    avgpool = std::make_shared<AdaptiveAvgPool2d>(1);  // kuangliu: F.avg_pool2d, no module
  fc = register_module(variant == Variant::cifar ? "linear" : "fc",
                       std::make_shared<Linear>(512 * expansion, num_classes, true, gen));
  if (variant == Variant::imagenet) {
    for (auto& [name, m] : named_modules()) {
      if (auto* c = dynamic_cast<Conv2d*>(m))
        init::kaiming_normal_(c->weight, 0, init::FanMode::fan_out, "relu", gen);
    }
  }
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = bn1->forward_relu(conv1->forward(x));
  if (maxpool) h = maxpool->forward(h);
  h = layer4->forward(layer3->forward(layer2->forward(layer1->forward(h))));
  return fc->forward(flatten(avgpool->forward(h), 1));  // (N, C)
}

}  // namespace ringflow::models
