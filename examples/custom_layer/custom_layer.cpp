// A layer of your own inside a ringflow model: Swish with a learnable slope per channel,
// y = x * sigmoid(beta_c * x), written with ringflow's ops so that autograd differentiates
// it (no backward to write), trained with the rest of a small CNN on Fashion-MNIST.
//
//   make && ./custom_layer [steps]      # needs Debian's dataset-fashion-mnist
#include <ringflow/framework/ringflow.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

using namespace ringflow;

// A Module owns its parameters: register_parameter makes beta a leaf that requires grad, named
// "beta" in the state_dict (e.g. "1.beta" inside a Sequential), moved by to(device).
class LearnableSwish : public nn::Module {
 public:
  explicit LearnableSwish(int64_t channels)
      : Module("LearnableSwish"),
        beta(register_parameter("beta", ones({channels, 1, 1}))) {}  // broadcast over H, W

  Tensor forward(const Tensor& x) override { return mul(x, sigmoid(mul(x, beta))); }

  Tensor beta;
};

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1), std::make_shared<LearnableSwish>(16),
      std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1), std::make_shared<LearnableSwish>(32),
      std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(32 * 7 * 7, 10)});

  const auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.2860f},
                                                      std::vector<float>{0.3530f});
  data::DataLoader train(data::Mnist::open(data::kFashionMnistDir, /*train=*/true),
                         {.batch_size = 64, .drop_last = true, .transforms = {norm}});
  data::DataLoader test(data::Mnist::open(data::kFashionMnistDir, /*train=*/false),
                        {.batch_size = 1000, .shuffle = false, .transforms = {norm}});
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});

  train.start_epoch(0);
  data::Batch batch;
  double window = 0;
  for (int64_t step = 1; step <= steps && train.next(batch); ++step) {
    Tensor loss = cross_entropy((*model)(batch.images), batch.labels);
    sgd.zero_grad();
    loss.backward();  // through the Swish's sigmoid and product, into beta
    sgd.step();
    window += loss.item();
    if (step % 50 == 0) {
      std::printf("step %lld: loss %.4f\n", static_cast<long long>(step), window / 50);
      window = 0;
    }
  }

  NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0, total = 0;
  for (const data::Batch& b : test.epoch(0)) {
    correct += static_cast<int64_t>(sum(eq(argmax((*model)(b.images), 1), b.labels)).item());
    total += b.labels.numel();
  }
  const auto& swish = dynamic_cast<LearnableSwish&>(*(*model)[1]);
  std::printf("test accuracy %.2f%% (%lld/%lld); first layer's beta now %.3f .. %.3f\n",
              100.0 * correct / total, static_cast<long long>(correct),
              static_cast<long long>(total), amin(swish.beta).item(), max(swish.beta).item());
  return 0;
}
