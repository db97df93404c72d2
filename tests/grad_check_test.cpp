// Every differentiable op: analytic gradient against central finite differences in f64,
// on the reference kernels. Inputs are kept away from kinks (relu at 0, max ties, log at 0).
#include <functional>
#include <map>
#include "ringflow/tests/testing.h"

using namespace ringflow;
using ringflow::testing::check_grad;
using ringflow::testing::param;
using ringflow::testing::seeded;

namespace {
// A leaf with values in [lo, hi): away from 0 for log/sqrt/div.
Tensor positive(const Shape& shape, uint64_t seed, double lo = 0.5, double hi = 2.0) {
  Generator gen(seed);
  Tensor t = rand(shape, &gen, DType::f64, lo, hi);
  t.requires_grad_();
  return t;
}
Tensor labels(const std::vector<double>& v) { return from_vector(v, {(int64_t)v.size()}, DType::i64); }
}  // namespace

TEST_CASE("elementwise binary ops with broadcasting") {
  const Tensor a = param({2, 3, 1}, 1), b = param({3, 4}, 2), pos = positive({3, 4}, 3);
  CHECK(check_grad([](auto& x) { return add(x[0], x[1]); }, {a, b}));
  CHECK(check_grad([](auto& x) { return sub(x[0], x[1]); }, {a, b}));
  CHECK(check_grad([](auto& x) { return mul(x[0], x[1]); }, {a, b}));
  CHECK(check_grad([](auto& x) { return div(x[0], x[1]); }, {a, pos}));
  CHECK(check_grad([](auto& x) { return maximum(x[0], x[1]); }, {a, b}));
  CHECK(check_grad([](auto& x) { return minimum(x[0], x[1]); }, {a, b}));
  CHECK(check_grad([](auto& x) { return pow(x[0], x[1]); }, {positive({2, 3, 1}, 4), param({3, 4}, 5)}));
  CHECK(check_grad([](auto& x) { return pow(x[0], 3.0); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0] * 2.5 - 1.0 / x[1]; }, {a, pos}));
}

TEST_CASE("elementwise unary ops") {
  const Tensor a = param({3, 5}, 6), pos = positive({3, 5}, 7);
  CHECK(check_grad([](auto& x) { return neg(x[0]); }, {a}));
  CHECK(check_grad([](auto& x) { return exp(x[0]); }, {a}));
  CHECK(check_grad([](auto& x) { return log(x[0]); }, {pos}));
  CHECK(check_grad([](auto& x) { return sqrt(x[0]); }, {pos}));
  CHECK(check_grad([](auto& x) { return abs(x[0]); }, {a}));
  CHECK(check_grad([](auto& x) { return relu(x[0]); }, {a}));
  CHECK(check_grad([](auto& x) { return sigmoid(x[0]); }, {a}));
  CHECK(check_grad([](auto& x) { return tanh(x[0]); }, {a}));
  const Tensor cond = gt(seeded({3, 1}, 8), scalar_tensor(0.0, DType::f64));
  CHECK(check_grad([cond](auto& x) { return where(cond, x[0], x[1]); }, {a, param({5}, 9)}));
}

TEST_CASE("reductions") {
  const Tensor a = param({3, 4, 5}, 10);
  CHECK(check_grad([](auto& x) { return sum(x[0]); }, {a}));
  CHECK(check_grad([](auto& x) { return sum(x[0], {0, 2}); }, {a}));
  CHECK(check_grad([](auto& x) { return mean(x[0], {-1}, true); }, {a}));
  CHECK(check_grad([](auto& x) { return var(x[0], {1}); }, {a}));
  CHECK(check_grad([](auto& x) { return var(x[0], {}, 0); }, {a}));
  CHECK(check_grad([](auto& x) { return amax(x[0], {1}); }, {a}));
  CHECK(check_grad([](auto& x) { return amin(x[0], {0, 2}, true); }, {a}));
  CHECK(check_grad([](auto& x) { return max(x[0], 2); }, {a}));
  CHECK(check_grad([](auto& x) { return max(x[0]); }, {a}));
}

TEST_CASE("matmul and linear") {
  CHECK(check_grad([](auto& x) { return matmul(x[0], x[1]); }, {param({3, 4}, 11), param({4, 5}, 12)}));
  CHECK(check_grad([](auto& x) { return matmul(x[0], x[1]); }, {param({2, 1, 3, 4}, 13), param({3, 4, 2}, 14)}));
  CHECK(check_grad([](auto& x) { return matmul(x[0], x[1]); }, {param({4}, 15), param({2, 4, 3}, 16)}));
  CHECK(check_grad([](auto& x) { return matmul(x[0], x[1]); }, {param({3, 4}, 17), param({4}, 18)}));
  CHECK(check_grad([](auto& x) { return matmul(x[0].t(), x[1].t()); }, {param({4, 3}, 19), param({5, 4}, 20)}));
  CHECK(check_grad([](auto& x) { return linear(x[0], x[1], x[2]); },
                   {param({5, 7}, 21), param({3, 7}, 22), param({3}, 23)}));
  CHECK(check_grad([](auto& x) { return linear(x[0], x[1]); }, {param({2, 5, 7}, 24), param({3, 7}, 25)}));
  // On the reference kernels, whose table has matmul_bias: the fused forward, relu's mask.
  CHECK(check_grad([](auto& x) { return linear_relu(x[0], x[1], x[2]); },
                   {param({5, 7}, 61), param({3, 7}, 62), param({3}, 63)}));
  CHECK(check_grad([](auto& x) { return linear_relu(x[0], x[1], x[2]); },
                   {param({2, 5, 7}, 64), param({3, 7}, 65), param({3}, 66)}));
  CHECK(check_grad([](auto& x) { return linear_relu(x[0], x[1]); }, {param({5, 7}, 67), param({3, 7}, 68)}));
}

// Kernel calls counted while fn runs: op name -> calls.
static std::map<std::string, int64_t> kernel_calls(const std::function<void()>& fn) {
  reset_op_times();
  set_op_profiling(true);
  fn();
  set_op_profiling(false);
  std::map<std::string, int64_t> calls;
  for (const OpTime& o : op_times()) calls[o.op] = o.calls;
  return calls;
}

TEST_CASE("linear and linear_relu: one matmul_bias kernel where the table has it, the composed ops' values") {
  const Tensor x = param({6, 7}, 69), w = param({4, 7}, 70), b = param({4}, 71);
  for (const bool relu : {false, true}) {
    CAPTURE(relu);
    const auto layer = [&] { return relu ? linear_relu(x, w, b) : linear(x, w, b); };
    const Tensor composed = layer();  // the cpu table: no matmul_bias
    Tensor fused;
    std::map<std::string, int64_t> calls;
    {
      ReferenceKernelsGuard reference;
      calls = kernel_calls([&] { fused = layer(); });
    }
    CHECK(calls == std::map<std::string, int64_t>{{"matmul_bias", 1}});
    CHECK(ringflow::testing::all_close(fused, composed, 1e-12, 1e-12, "fused against composed"));
    CHECK(ringflow::testing::all_close(composed, relu ? ringflow::relu(add(matmul(x, w.t()), b)) : add(matmul(x, w.t()), b),
                                       0, 0, "composed"));
  }
  // nn::Sequential runs a Linear followed by a ReLU as linear_relu (the ReLU stays a child).
  nn::Sequential mlp{std::make_shared<nn::Linear>(7, 4), std::make_shared<nn::ReLU>()};
  mlp.to(DType::f64);
  ReferenceKernelsGuard reference;
  CHECK(kernel_calls([&] { mlp.forward(x); }) == std::map<std::string, int64_t>{{"matmul_bias", 1}});
  CHECK(mlp.named_children().size() == 2);
}

TEST_CASE("views, cat and gather") {
  const Tensor a = param({3, 4, 5}, 26);
  CHECK(check_grad([](auto& x) { return x[0].reshape({12, 5}); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0].permute({2, 0, 1}).contiguous(); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0].transpose(0, 2).reshape({-1}); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0].narrow(1, 1, 2); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0].slice(2, 0, 5, 2); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0].select(0, 1); }, {a}));
  CHECK(check_grad([](auto& x) { return x[0].unsqueeze(1).expand({3, 2, 4, 5}); }, {a}));
  CHECK(check_grad([](auto& x) { return flatten(x[0], 1); }, {a}));
  CHECK(check_grad([](auto& x) { return cat({x[0], x[1], x[0]}, 1); }, {a, param({3, 2, 5}, 27)}));
  const Tensor index = from_vector({2, 0, 1, 1, 3, 3, 0, 2, 1, 0, 0, 3}, {3, 4, 1}, DType::i64)
                           .expand({3, 4, 2}).contiguous();
  CHECK(check_grad([index](auto& x) { return gather(x[0], 1, index); }, {a}));
}

TEST_CASE("conv2d") {
  const Tensor x = param({2, 3, 7, 6}, 30), w = param({4, 3, 3, 3}, 31), b = param({4}, 32);
  CHECK(check_grad([](auto& v) { return conv2d(v[0], v[1], v[2]); }, {x, w, b}));
  CHECK(check_grad([](auto& v) { return conv2d(v[0], v[1], v[2], conv2d_params({2, 2}, {1, 1})); }, {x, w, b}));
  CHECK(check_grad([](auto& v) { return conv2d(v[0], v[1], {}, conv2d_params({1, 1}, {2, 2}, {2, 2})); }, {x, w}));
  Conv2dParams asym;
  asym.pad_top = 0; asym.pad_bottom = 2; asym.pad_left = 1; asym.pad_right = 0;
  CHECK(check_grad([asym](auto& v) { return conv2d(v[0], v[1], v[2], asym); }, {x, w, b}));
  CHECK(check_grad([](auto& v) { return conv2d(v[0], v[1], {}, conv2d_params({1, 1}, {0, 3})); },
                   {x, param({2, 3, 1, 7}, 33)}));
  CHECK(check_grad([](auto& v) { return conv2d(v[0], v[1], {}, conv2d_params({1, 1}, {3, 0})); },
                   {x, param({2, 3, 7, 1}, 34)}));
  // A channels-last input goes through the same rule.
  CHECK(check_grad([](auto& v) { return conv2d(v[0].channels_last(), v[1], v[2]); }, {x, w, b}));
}

TEST_CASE("pooling") {
  const Tensor x = param({2, 3, 7, 6}, 40);
  CHECK(check_grad([](auto& v) { return max_pool2d(v[0], pool2d_params({2, 2})); }, {x}));
  CHECK(check_grad([](auto& v) { return max_pool2d(v[0], pool2d_params({3, 3}, {{2, 2}}, {1, 1}, true)); }, {x}));
  CHECK(check_grad([](auto& v) { return avg_pool2d(v[0], pool2d_params({2, 2})); }, {x}));
  CHECK(check_grad([](auto& v) { return avg_pool2d(v[0], pool2d_params({3, 3}, {{2, 2}}, {1, 1}, true, true)); }, {x}));
  CHECK(check_grad([](auto& v) { return avg_pool2d(v[0], pool2d_params({3, 2}, {{2, 1}}, {1, 1}, true, false)); }, {x}));
  CHECK(check_grad([](auto& v) { return adaptive_avg_pool2d(v[0], {3, 4}); }, {x}));
  CHECK(check_grad([](auto& v) { return adaptive_avg_pool2d(v[0], {1, 1}); }, {x}));
}

TEST_CASE("batch_norm") {
  const Tensor x = param({4, 3, 3, 2}, 50), w = param({3}, 51), b = param({3}, 52);
  CHECK(check_grad([](auto& v) { return batch_norm(v[0], {}, {}, v[1], v[2], true); }, {x, w, b}));
  CHECK(check_grad([](auto& v) { return batch_norm(v[0], {}, {}, {}, {}, true); }, {x}));
  CHECK(check_grad([](auto& v) { return batch_norm(v[0], {}, {}, v[1], v[2], true); },
                   {param({6, 3}, 53), w, b}));
  const Tensor rm = seeded({3}, 54), rv = positive({3}, 55).detach();
  CHECK(check_grad([rm, rv](auto& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); }, {x, w, b}));
}

TEST_CASE("softmax, dropout and losses") {
  const Tensor a = param({3, 4, 5}, 60);
  CHECK(check_grad([](auto& x) { return softmax(x[0], 1); }, {a}));
  CHECK(check_grad([](auto& x) { return log_softmax(x[0], -1); }, {a}));
  CHECK(check_grad([](auto& x) { return log_softmax(x[0], 0); }, {a}));
  CHECK(check_grad([](auto& x) {
    Generator gen(7);  // the same mask on every call
    return dropout(x[0], 0.3, true, &gen);
  }, {a}));
  const Tensor logits = param({4, 5}, 61), target = labels({1, 0, 4, 4});
  CHECK(check_grad([target](auto& x) { return cross_entropy(x[0], target); }, {logits}));
  CHECK(check_grad([target](auto& x) { return cross_entropy(x[0], target, Reduction::sum); }, {logits}));
  CHECK(check_grad([target](auto& x) { return cross_entropy(x[0], target, Reduction::mean, 0.1); }, {logits}));
  CHECK(check_grad([target](auto& x) { return nll_loss(log_softmax(x[0], 1), target, Reduction::none); }, {logits}));
  CHECK(check_grad([](auto& x) { return mse_loss(x[0], x[1]); }, {param({3, 4}, 62), param({3, 4}, 63)}));
}
