#include "ringflow/models/small_cnn.h"

namespace ringflow::models {

using namespace nn;

SmallCnn::SmallCnn(int64_t num_classes, Generator* gen) : Module("SmallCnn") {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(1, 16, 3, 1, 1, true, gen));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(16));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(16, 32, 3, 1, 1, true, gen));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(32));
  fc = register_module("fc", std::make_shared<Linear>(32 * 7 * 7, num_classes, true, gen));
}

Tensor SmallCnn::forward(const Tensor& x) {
  const Pool2dParams pool = pool2d_params({2, 2});
  Tensor h = max_pool2d(relu(bn1->forward(conv1->forward(x))), pool);  // (N, 16, 14, 14)
  h = max_pool2d(relu(bn2->forward(conv2->forward(h))), pool);          // (N, 32, 7, 7)
  return fc->forward(flatten(h, 1));                                     // (N, C)
}

Mlp::Mlp(int64_t num_classes, Generator* gen) : Module("Mlp") {
  fc1 = register_module("fc1", std::make_shared<Linear>(28 * 28, 256, true, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(256, 128, true, gen));
  fc3 = register_module("fc3", std::make_shared<Linear>(128, num_classes, true, gen));
}

Tensor Mlp::forward(const Tensor& x) {
  Tensor h = fc1->forward_relu(flatten(x, 1));
  h = fc2->forward_relu(h);
  return fc3->forward(h);
}

}  // namespace ringflow::models
