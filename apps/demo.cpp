// demo: trains a small CNN on Fashion-MNIST (Debian's dataset-fashion-mnist) with
// ringflow's functional API and autograd, plain SGD with momentum, and reports the test
// accuracy. It stands in for apps/train until the nn, data and optim modules land.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "framework/data/idx.h"
#include "framework/ringflow.h"

using namespace ringflow;

namespace {

struct Param {
  std::string name;
  Tensor value, momentum;
};

// PyTorch's default init for conv and linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Tensor init_uniform(const Shape& shape, int64_t fan_in, Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  Tensor t = rand(shape, &gen, DType::f32, -bound, bound);
  t.requires_grad_();
  return t;
}

struct SmallCnn {
  // conv(1->16) bn relu pool, conv(16->32) bn relu pool, linear(32*7*7 -> 10)
  std::vector<Param> params;
  Tensor rm1 = zeros({16}), rv1 = ones({16}), rm2 = zeros({32}), rv2 = ones({32});

  explicit SmallCnn(Generator& gen) {
    auto add = [&](const std::string& name, Tensor t) { params.push_back({name, t, zeros_like(t)}); };
    add("conv1.weight", init_uniform({16, 1, 3, 3}, 9, gen));
    add("conv1.bias", init_uniform({16}, 9, gen));
    add("bn1.weight", ones({16}).requires_grad_());
    add("bn1.bias", zeros({16}).requires_grad_());
    add("conv2.weight", init_uniform({32, 16, 3, 3}, 144, gen));
    add("conv2.bias", init_uniform({32}, 144, gen));
    add("bn2.weight", ones({32}).requires_grad_());
    add("bn2.bias", zeros({32}).requires_grad_());
    add("fc.weight", init_uniform({10, 32 * 7 * 7}, 32 * 7 * 7, gen));
    add("fc.bias", init_uniform({10}, 32 * 7 * 7, gen));
  }
  const Tensor& p(size_t i) const { return params[i].value; }

  Tensor forward(const Tensor& x, bool training) {  // x: (N, 1, 28, 28)
    const auto pad1 = conv2d_params({1, 1}, {1, 1});
    Tensor h = conv2d(x, p(0), p(1), pad1);
    h = max_pool2d(relu(batch_norm(h, rm1, rv1, p(2), p(3), training)), pool2d_params({2, 2}));
    h = conv2d(h, p(4), p(5), pad1);
    h = max_pool2d(relu(batch_norm(h, rm2, rv2, p(6), p(7), training)), pool2d_params({2, 2}));
    return linear(flatten(h, 1), p(8), p(9));  // (N, 10)
  }

  void sgd_step(double lr, double momentum) {
    NoGradGuard no_grad;
    for (Param& q : params) {
      q.momentum.mul_(momentum).add_(q.value.grad());
      q.value.add_(q.momentum, -lr);
      q.value.set_grad(Tensor());
    }
  }
};

// Images scaled to [0, 1] and normalised with the Fashion-MNIST mean and std.
Tensor batch_images(const data::IdxArray& images, const std::vector<int64_t>& order, size_t begin,
                    size_t count) {
  const int64_t pixels = images.shape[1] * images.shape[2];
  Tensor out = empty({static_cast<int64_t>(count), 1, images.shape[1], images.shape[2]});
  float* dst = out.data<float>();
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* src = images.data.data() + order[begin + i] * pixels;
    for (int64_t j = 0; j < pixels; ++j) dst[i * pixels + j] = (src[j] / 255.0f - 0.2860f) / 0.3530f;
  }
  return out;
}

Tensor batch_labels(const data::IdxArray& labels, const std::vector<int64_t>& order, size_t begin,
                    size_t count) {
  Tensor out = empty({static_cast<int64_t>(count)}, DType::i64);
  for (size_t i = 0; i < count; ++i) out.data<int64_t>()[i] = labels.data[order[begin + i]];
  return out;
}

// CLI11's PositiveNumber and NonNegativeNumber print the whole double range in their
// messages; these say it plainly ("--batch-size: must be > 0, got -3").
CLI::Validator bound(double limit, bool inclusive) {
  return CLI::Validator(
      [=](std::string& s) {
        double v = 0;
        try { v = std::stod(s); } catch (const std::exception&) { return "not a number: " + s; }
        if (inclusive ? v >= limit : v > limit) return std::string();
        return fmt::format("must be {} {}, got {}", inclusive ? ">=" : ">", limit, s);
      },
      fmt::format("{} {}", inclusive ? ">=" : ">", limit));
}
CLI::Validator above(double limit) { return bound(limit, false); }
CLI::Validator at_least(double limit) { return bound(limit, true); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small CNN on Fashion-MNIST with ringflow's tensor and autograd engine"};
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 1, threads = 0, log_every = 100;
  int64_t batch_size = 64, max_iters = 0;
  double lr = 0.05, momentum = 0.9;
  uint64_t seed = 0;
  app.add_option("--data-dir", data_dir, "folder with the gzip IDX files")->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the training set")->capture_default_str()->check(above(0));
  app.add_option("--batch-size", batch_size, "images per step")->capture_default_str()->check(above(0));
  app.add_option("--lr", lr, "SGD learning rate")->capture_default_str()->check(above(0));
  app.add_option("--momentum", momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->capture_default_str()->check(at_least(0));
  app.add_option("--max-iters", max_iters, "stop each epoch after this many steps (0: all)")->capture_default_str()->check(at_least(0));
  app.add_option("--log-every", log_every, "steps between loss lines")->capture_default_str()->check(above(0));
  app.add_option("--seed", seed, "seed of the initialisation and the shuffle")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (threads > 0) set_num_threads(threads);
    const auto train = data::read_idx_pair(data_dir + "/train-images-idx3-ubyte.gz",
                                           data_dir + "/train-labels-idx1-ubyte.gz");
    const auto test = data::read_idx_pair(data_dir + "/t10k-images-idx3-ubyte.gz",
                                          data_dir + "/t10k-labels-idx1-ubyte.gz");
    const auto n_train = static_cast<size_t>(train.images.shape[0]);
    const auto n_test = static_cast<size_t>(test.images.shape[0]);
    fmt::print("Fashion-MNIST: {} training and {} test images from {}; {} threads\n", n_train,
               n_test, data_dir, num_threads());

    Generator gen(seed);
    SmallCnn model(gen);
    std::vector<int64_t> order(n_train);
    if (static_cast<size_t>(batch_size) > n_train)
      throw std::invalid_argument(fmt::format("--batch-size {} exceeds the {} training images",
                                              batch_size, n_train));
    const size_t steps_per_epoch = n_train / batch_size;
    const size_t steps = max_iters > 0 ? std::min<size_t>(max_iters, steps_per_epoch) : steps_per_epoch;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::iota(order.begin(), order.end(), 0);
      for (size_t i = n_train - 1; i > 0; --i) std::swap(order[i], order[gen.next_u64() % (i + 1)]);
      const auto start = std::chrono::steady_clock::now();
      double running = 0;
      for (size_t step = 0; step < steps; ++step) {
        Tensor x = batch_images(train.images, order, step * batch_size, batch_size);
        Tensor y = batch_labels(train.labels, order, step * batch_size, batch_size);
        Tensor loss = cross_entropy(model.forward(x, /*training=*/true), y);
        loss.backward();
        model.sgd_step(lr, momentum);
        running += loss.item();
        if ((step + 1) % log_every == 0 || step + 1 == steps) {
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          fmt::print("Epoch [{}], Iteration [{}/{}], Loss: {:.4f}  ({:.0f} images/s)\n", epoch,
                     step + 1, steps, running / ((step % log_every) + 1),
                     (step + 1) * batch_size / secs);
          running = 0;
        }
      }
      // Evaluation: running statistics, no graph.
      NoGradGuard no_grad;
      std::vector<int64_t> all(n_test);
      std::iota(all.begin(), all.end(), 0);
      double loss_sum = 0;
      int64_t correct = 0;
      for (size_t b = 0; b < n_test; b += 1000) {
        const size_t count = std::min<size_t>(1000, n_test - b);
        Tensor logits = model.forward(batch_images(test.images, all, b, count), /*training=*/false);
        Tensor labels = batch_labels(test.labels, all, b, count);
        loss_sum += cross_entropy(logits, labels, Reduction::sum).item();
        correct += static_cast<int64_t>(sum(eq(argmax(logits, 1), labels)).item());
      }
      fmt::print("Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n", loss_sum / n_test,
                 correct, n_test, 100.0 * correct / n_test);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "demo: {}\n", e.what());
    return 1;
  }
  return 0;
}
