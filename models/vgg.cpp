#include "ringflow/models/vgg.h"

namespace ringflow::models {

using namespace nn;

std::vector<int64_t> vgg_config(int depth) {
  switch (depth) {
    case 11: return {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 13: return {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    case 16:
      return {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
    case 19:
      return {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
              512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
    default:
      throw std::invalid_argument(cat("VGG: no depth ", depth, " (11, 13, 16, 19)"));
  }
}

Vgg::Vgg(int depth, Variant variant, int64_t num_classes, Generator* gen, double dropout)
    : Module("Vgg"), variant_(variant) {
  features = register_module("features", std::make_shared<Sequential>());
  int64_t in = 3;
  for (int64_t v : vgg_config(depth)) {
    if (v == 0) {
      features->push_back(std::make_shared<MaxPool2d>(2, 2));
      continue;
    }
    auto conv = features->push_back(std::make_shared<Conv2d>(in, v, 3, 1, 1, true, gen));
    features->push_back(std::make_shared<BatchNorm2d>(v));
    features->push_back(std::make_shared<ReLU>());
    if (variant == Variant::imagenet) {
      init::kaiming_normal_(conv->weight, 0, init::FanMode::fan_out, "relu", gen);
      init::zeros_(conv->bias);
    }
    in = v;
  }
  if (variant == Variant::cifar) {
    features->push_back(std::make_shared<AvgPool2d>(1, 1));
    // kuangliu's classifier is a bare Linear: key `classifier.weight`.
    classifier = register_module("classifier", std::make_shared<Linear>(512, num_classes, true, gen));
    return;
  }
  avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(7));
  auto head = std::make_shared<Sequential>();
  classifier = register_module("classifier", head);
  for (auto [i, o] : {std::pair<int64_t, int64_t>{512 * 7 * 7, 4096}, {4096, 4096}}) {
    head->push_back(std::make_shared<Linear>(i, o, true, gen));
    head->push_back(std::make_shared<ReLU>());
    head->push_back(std::make_shared<Dropout>(dropout, gen));
  }
  head->push_back(std::make_shared<Linear>(4096, num_classes, true, gen));
  for (size_t i : {0, 3, 6}) {
    auto fc = std::static_pointer_cast<Linear>((*head)[i]);
    init::normal_(fc->weight, 0.0, 0.01, gen);
    init::zeros_(fc->bias);
  }
}

Tensor Vgg::forward(const Tensor& x) {
  Tensor h = features->forward(x);  // (N, 512, H/32, W/32)
  if (variant_ == Variant::imagenet) h = avgpool->forward(h);  // (N, 512, 7, 7)
  return classifier->forward(flatten(h, 1));
}

}  // namespace ringflow::models
