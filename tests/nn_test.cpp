// nn::Module semantics: registration order, train/eval, state_dict round trips through
// safetensors, load_state_dict's errors, to(dtype), zero_grad; the layers' forward against
// the functional ops; default initialisation against PyTorch's bounds and statistics.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "ringflow/framework/ringflow.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;
using namespace ringflow::nn;
namespace fs = std::filesystem;

namespace {

// conv(3->4) bn relu, then a nested block with a linear: exercises dotted names.
class Inner : public Module {
 public:
  explicit Inner(Generator* gen) : Module("Inner") {
    fc = register_module("fc", std::make_shared<Linear>(4, 2, true, gen));
    scale = register_parameter("scale", ones({2}));
    register_buffer("steps", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) override { return mul(fc->forward(x), scale); }
  std::shared_ptr<Linear> fc;
  Tensor scale;
};

class Net : public Module {
 public:
  explicit Net(Generator* gen) : Module("Net") {
    conv = register_module("conv", std::make_shared<Conv2d>(3, 4, 3, 1, 1, true, gen));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(4));
    head = register_module("head", std::make_shared<Inner>(gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn->forward(conv->forward(x)));
    return head->forward(flatten(adaptive_avg_pool2d(h, {1, 1}), 1));
  }
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Inner> head;
};

std::vector<std::string> keys(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [k, v] : named) out.push_back(k);
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() /
          ("ringflow_nn_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace

TEST_CASE("parameters, buffers and state_dict keep registration order with dotted names") {
  Generator gen(1);
  Net net(&gen);
  CHECK(keys(net.named_parameters()) ==
        std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                 "head.scale", "head.fc.weight", "head.fc.bias"});
  CHECK(keys(net.named_parameters(/*recurse=*/false)).empty());
  CHECK(keys(net.named_buffers()) ==
        std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
                                 "head.steps"});
  // PyTorch's state_dict order: per module its parameters, its buffers, then its children.
  CHECK(keys(net.state_dict()) ==
        std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                 "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
                                 "head.scale", "head.steps", "head.fc.weight", "head.fc.bias"});
  CHECK(net.num_parameters() == 4 * 3 * 9 + 4 + 4 + 4 + 2 + 2 * 4 + 2);
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());
  for (const Tensor& b : net.buffers()) CHECK_FALSE(b.requires_grad());
  CHECK(net.bn->num_batches_tracked.dtype() == DType::i64);
  CHECK(net.bn->num_batches_tracked.dim() == 0);
  // Members alias the registered tensors.
  CHECK(net.named_parameters()[0].second.impl() == net.conv->weight.impl());
  CHECK(net.child("head.fc").get() == net.head->fc.get());
  CHECK(error_of([&] { net.child("head.nope"); }).find("no child module 'nope'") !=
        std::string::npos);
  std::vector<std::string> modules;
  for (auto& [name, m] : net.named_modules()) modules.push_back(name + ":" + m->type_name());
  CHECK(modules == std::vector<std::string>{":Net", "conv:Conv2d", "bn:BatchNorm2d",
                                            "head:Inner", "head.fc:Linear"});
}

TEST_CASE("registering a taken or dotted name is an error") {
  class Bad : public Module {
   public:
    explicit Bad(int which) : Module("Bad") {
      register_parameter("w", ones({1}));
      if (which == 0) register_buffer("w", ones({1}));
      if (which == 1) register_module("a.b", std::make_shared<ReLU>());
    }
    Tensor forward(const Tensor& x) override { return x; }
  };
  CHECK(error_of([] { Bad b(0); }).find("'w': the name is already taken") != std::string::npos);
  CHECK(error_of([] { Bad b(1); }).find("bad module name 'a.b'") != std::string::npos);
}

TEST_CASE("train() and eval() reach every descendant; Sequential names children by index") {
  Generator gen(2);
  auto seq = std::make_shared<Sequential>(std::initializer_list<ModulePtr>{
      std::make_shared<Linear>(3, 3, true, &gen), std::make_shared<ReLU>(),
      std::make_shared<Dropout>(0.5, &gen)});
  Net net(&gen);
  CHECK(net.is_training());
  net.eval();
  for (auto& [name, m] : net.named_modules()) CHECK_FALSE(m->is_training());
  net.train();
  for (auto& [name, m] : net.named_modules()) CHECK(m->is_training());
  CHECK(keys(seq->state_dict()) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(seq->size() == 3);
  // Dropout is the identity in eval, and zeroes about half in training.
  const Tensor x = ones({1000, 3});
  seq->eval();
  const Tensor lin = relu(std::static_pointer_cast<Linear>((*seq)[0])->forward(x));
  CHECK(testing::all_close(seq->forward(x), lin));
  seq->train();
  const Tensor y = seq->forward(x);
  const double kept = sum(ne(y, zeros_like(y))).item() / sum(ne(lin, zeros_like(lin))).item();
  CHECK(kept == doctest::Approx(0.5).epsilon(0.1));
}

TEST_CASE("layers compute what the functional ops compute") {
  Generator gen(3);
  const Tensor x = randn({2, 3, 8, 8}, &gen);
  Conv2d conv(Conv2dOptions{3, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, &gen);
  CHECK(testing::all_close(conv(x), conv2d(x, conv.weight, conv.bias,
                                           conv2d_params({2, 2}, {1, 1}))));
  Conv2d no_bias(3, 5, 1, 1, 0, /*bias=*/false, &gen);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(keys(no_bias.state_dict()) == std::vector<std::string>{"weight"});
  CHECK(MaxPool2d(3, 2, 1)(x).shape() == Shape{2, 3, 4, 4});
  CHECK(AvgPool2d(2)(x).shape() == Shape{2, 3, 4, 4});
  CHECK(testing::all_close(AvgPool2d(2)(x), avg_pool2d(x, pool2d_params({2, 2}))));
  CHECK(AdaptiveAvgPool2d(1)(x).shape() == Shape{2, 3, 1, 1});
  CHECK(Flatten()(x).shape() == Shape{2, 192});
  CHECK(testing::all_close(ReLU()(x), relu(x)));
  Linear fc(192, 7, true, &gen);
  CHECK(testing::all_close(fc(Flatten()(x)), linear(flatten(x, 1), fc.weight, fc.bias)));
}

TEST_CASE("BatchNorm2d: running statistics with momentum, num_batches_tracked, eval") {
  Generator gen(4);
  BatchNorm2d bn(3);
  const Tensor x = randn({4, 3, 5, 5}, &gen, DType::f32, 2.0, 3.0);
  bn(x);
  bn(x);
  CHECK(bn.num_batches_tracked.item() == 2);
  // After two updates with momentum 0.1: rm = (1 - 0.9^2) * mean, rv = 0.81 + 0.19 * var.
  const Tensor m = mean(x, {0, 2, 3}), v = var(x, {0, 2, 3}, /*correction=*/1);
  CHECK(testing::all_close(bn.running_mean, mul(m, 0.19), 1e-5, 1e-6));
  CHECK(testing::all_close(bn.running_var, add(mul(v, 0.19), 0.81), 1e-5, 1e-6));
  bn.eval();
  const Tensor y = bn(x);
  CHECK(bn.num_batches_tracked.item() == 2);
  const Tensor expect = div(sub(x, bn.running_mean.reshape({1, 3, 1, 1})),
                            sqrt(add(bn.running_var.reshape({1, 3, 1, 1}), 1e-5)));
  CHECK(testing::all_close(y, expect, 1e-5, 1e-5));
  // momentum none: the cumulative average.
  BatchNormOptions cumulative;
  cumulative.momentum = std::nullopt;
  BatchNorm2d avg(3, cumulative);
  avg(x);
  CHECK(testing::all_close(avg.running_mean, m, 1e-5, 1e-6));
  CHECK_THROWS_WITH_AS(BatchNorm2d(4)(x), doctest::Contains("has 3 channels"),
                       std::invalid_argument);
}

TEST_CASE("state_dict round trip through safetensors") {
  Generator gen(5);
  Net a(&gen), b(&gen);
  a(randn({2, 3, 6, 6}, &gen));  // moves bn's running statistics and num_batches_tracked
  const std::string path = temp_file("state.safetensors");
  save_safetensors(path, a.state_dict());
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.at("bn.num_batches_tracked").dtype() == DType::i64);
  CHECK(sum(abs(sub(b.conv->weight, a.conv->weight))).item() > 0);  // differ before loading
  b.load_state_dict(file.tensors);
  const NamedTensors sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sb[i].first);
    CHECK(sb[i].second.dtype() == sa[i].second.dtype());
    CHECK_MESSAGE(testing::all_close(sb[i].second, sa[i].second, 0, 0), sa[i].first);
  }
  CHECK(b.bn->num_batches_tracked.item() == 1);
  // Loading copies into the existing tensors: handles held elsewhere see the new values.
  CHECK(b.named_parameters()[0].second.impl() == b.conv->weight.impl());
  b.eval();
  a.eval();
  const Tensor x = randn({2, 3, 6, 6}, &gen);
  CHECK(testing::all_close(b(x), a(x), 0, 0));
  fs::remove(path);
}

TEST_CASE("load_state_dict names missing, unexpected and mis-shaped entries") {
  Generator gen(6);
  Net net(&gen);
  NamedTensors state = net.state_dict();
  std::map<std::string, Tensor> bad(state.begin(), state.end());
  bad.erase("bn.running_var");
  bad.erase("head.fc.bias");
  bad["head.fc.extra"] = ones({1});
  bad["conv.weight"] = ones({4, 3, 5, 5});
  const Tensor before = net.conv->bias.clone();
  bad["conv.bias"] = zeros({4});
  const std::string msg = error_of([&] { net.load_state_dict(bad); });
  INFO(msg);
  CHECK(msg.find("missing keys: bn.running_var, head.fc.bias") != std::string::npos);
  CHECK(msg.find("unexpected keys: head.fc.extra") != std::string::npos);
  CHECK(msg.find("conv.weight: loaded (4, 3, 5, 5), model (4, 3, 3, 3)") !=
        std::string::npos);
  // Nothing was copied.
  CHECK(testing::all_close(net.conv->bias, before, 0, 0));
  CHECK_THROWS_AS(net.load_state_dict(bad), std::invalid_argument);
  // strict = false tolerates missing and unexpected keys, never a shape mismatch.
  bad["conv.weight"] = ones({4, 3, 3, 3});
  net.load_state_dict(bad, /*strict=*/false);
  CHECK(testing::all_close(net.conv->weight, ones({4, 3, 3, 3})));
  CHECK(testing::all_close(net.conv->bias, zeros({4})));
  NamedTensors twice = state;
  twice.push_back(state.front());
  CHECK(error_of([&] { net.load_state_dict(twice); }).find("appears twice") != std::string::npos);
}

TEST_CASE("to(dtype) converts floating tensors in place; zero_grad") {
  Generator gen(7);
  Net net(&gen);
  Tensor w = net.conv->weight;  // a handle held elsewhere (as an optimizer would)
  const Tensor w32 = w.clone();
  net.to(DType::f64);
  CHECK(w.dtype() == DType::f64);
  CHECK(net.conv->weight.dtype() == DType::f64);
  CHECK(w.requires_grad());
  CHECK(net.bn->num_batches_tracked.dtype() == DType::i64);
  CHECK(testing::all_close(w.to(DType::f32), w32, 0, 0));
  Tensor loss = sum(net(randn({2, 3, 5, 5}, &gen, DType::f64)));
  loss.backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : net.parameters()) CHECK(sum(abs(p.grad())).item() == 0);
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
  net.to(Device::cpu());
  CHECK(net.conv->weight.device() == Device::cpu());
}

TEST_CASE("default initialisation follows PyTorch's bounds and statistics") {
  Generator gen(8);
  // Conv2d(64, 128, 3): fan_in 576, weight and bias ~ U(-1/24, 1/24).
  Conv2d conv(64, 128, 3, 1, 1, true, &gen);
  const double bound = 1.0 / std::sqrt(576.0);
  for (const Tensor& t : {conv.weight, conv.bias}) {
    CHECK(amax(t).item() <= bound);
    CHECK(amin(t).item() >= -bound);
  }
  const Tensor w = conv.weight.detach().to(DType::f64);
  CHECK(std::fabs(mean(w).item()) < 0.02 * bound);
  // Var of U(-b, b) is b^2 / 3 (73728 samples: ~1% relative error).
  CHECK(var(w).item() == doctest::Approx(bound * bound / 3).epsilon(0.03));
  CHECK(amax(w).item() > 0.99 * bound);

  Linear fc(1000, 100, true, &gen);
  CHECK(amax(abs(fc.weight)).item() <= 1.0 / std::sqrt(1000.0));
  CHECK(amax(abs(fc.bias)).item() <= 1.0 / std::sqrt(1000.0));
  BatchNorm2d bn(8);
  CHECK(testing::all_close(bn.weight, ones({8})));
  CHECK(testing::all_close(bn.bias, zeros({8})));
  CHECK(testing::all_close(bn.running_var, ones({8})));

  Tensor t = empty({256, 128, 3, 3});
  init::kaiming_normal_(t, 0, init::FanMode::fan_out, "relu", &gen);
  const double std_fan_out = std::sqrt(2.0 / (256 * 9));
  CHECK(std::sqrt(var(t.to(DType::f64)).item()) == doctest::Approx(std_fan_out).epsilon(0.02));
  init::trunc_normal_(t, 0.0, 1.0, -2, 2, &gen);
  CHECK(amax(abs(t)).item() <= 2.0);
  CHECK(init::calculate_gain("leaky_relu", std::sqrt(5.0)) ==
        doctest::Approx(std::sqrt(1.0 / 3.0)));
  CHECK_THROWS_WITH_AS(init::calculate_gain("gelu"), doctest::Contains("unknown nonlinearity"),
                       std::invalid_argument);
  // Large tensors are filled by several threads: the same numbers as the sequential rand()
  // and randn(), and the generator ends at the same counter.
  for (int normal = 0; normal < 2; ++normal) {
    Generator a(9), b(9);
    Tensor big = empty({3 << 20});
    const Tensor want = normal ? randn({3 << 20}, &b, DType::f32, 0.5, 2.0)
                               : rand({3 << 20}, &b, DType::f32, -0.5, 2.0);
    if (normal) init::normal_(big, 0.5, 2.0, &a);
    else init::uniform_(big, -0.5, 2.0, &a);
    CHECK(testing::all_close(big, want, 0, 0));
    CHECK(a.counter() == b.counter());
  }
  {
    init::SkipInitGuard skip;
    Tensor z = zeros({4});
    init::uniform_(z, 1, 2, &gen);
    init::ones_(z);
    CHECK(testing::all_close(z, zeros({4})));
    CHECK_FALSE(init::init_enabled());
  }
  CHECK(init::init_enabled());
  // Same seed, same weights.
  Generator g1(42), g2(42);
  CHECK(testing::all_close(Linear(10, 10, true, &g1).weight, Linear(10, 10, true, &g2).weight,
                           0, 0));
}
