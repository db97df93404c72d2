// Autograd semantics: diamonds, reuse, accumulation across backward calls, hooks and the
// end-of-backward callback, freed graphs, no_grad and detach. Expected gradients are the
// closed forms of the expressions (d/dx of x*x is 2x, ...), evaluated by the test.
#include "ringflow/tests/testing.h"

using namespace ringflow;
using ringflow::testing::all_close;
using ringflow::testing::param;

TEST_CASE("a tensor used several times sums its gradients (diamond)") {
  Tensor x = param({3}, 1);
  Tensor a = mul(x, x);        // x^2
  Tensor b = mul(x, 3.0);      // 3x
  Tensor y = sum(add(a, b));   // sum x^2 + 3x
  y.backward();
  CHECK(all_close(x.grad(), add(mul(x.detach(), 2.0), 3.0)));
}

TEST_CASE("gradients accumulate into .grad across backward calls") {
  Tensor x = param({2, 2}, 2);
  sum(mul(x, 2.0)).backward();
  sum(mul(x, 5.0)).backward();
  CHECK(all_close(x.grad(), full({2, 2}, 7.0, DType::f64)));
}

TEST_CASE("backward with an explicit gradient and on non-scalars") {
  Tensor x = param({2, 3}, 3);
  Tensor y = mul(x, x);
  Tensor g = ringflow::testing::seeded({2, 3}, 4);
  y.backward(g);
  CHECK(all_close(x.grad(), mul(mul(x.detach(), 2.0), g)));
  Tensor z = mul(x, 2.0);
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("(2, 3)"), std::invalid_argument);
}

TEST_CASE("second backward through a freed graph is a clear error; retain_graph allows it") {
  Tensor x = param({3}, 5);
  Tensor y = sum(exp(x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  CHECK(all_close(x.grad(), mul(exp(x.detach()), 2.0)));
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("second time"), std::runtime_error);
}

TEST_CASE("no_grad and detach record nothing") {
  Tensor x = param({3}, 6);
  {
    NoGradGuard guard;
    Tensor y = mul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.shares_storage(x));
  Tensor y = mul(d, x);  // only x receives a gradient
  sum(y).backward();
  CHECK(all_close(x.grad(), x.detach()));
  CHECK_FALSE(d.grad().defined());
}

TEST_CASE("a leaf that requires grad cannot be changed in place outside no_grad") {
  Tensor x = param({3}, 7);
  CHECK_THROWS_WITH_AS(x.add_(x.detach()), doctest::Contains("NoGradGuard"), std::invalid_argument);
  NoGradGuard guard;
  x.add_(ones({3}, DType::f64));
}

TEST_CASE("post-accumulate hooks fire once per leaf after all contributions, then the callback") {
  Tensor w1 = param({4}, 8), w2 = param({4}, 9);
  std::vector<std::string> events;
  w1.register_post_accumulate_grad_hook([&](const Tensor& p) {
    events.push_back("w1:" + std::to_string(p.grad().to_vector<double>()[0]));
    queue_callback([&] { events.push_back("end"); });
  });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w2"); });
  // w1 is used twice: the hook must see the sum of both contributions.
  Tensor h = add(mul(w1, w2), mul(w1, 2.0));
  sum(mul(h, w1)).backward();
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "end");
  // d/dw1 of sum(w1^2 w2 + 2 w1^2) = 2 w1 w2 + 4 w1
  const Tensor expected = add(mul(mul(w1.detach(), w2.detach()), 2.0), mul(w1.detach(), 4.0));
  CHECK(all_close(w1.grad(), expected));
  const std::string w1_event = events[0] == "w2" ? events[1] : events[0];
  CHECK(std::fabs(std::stod(w1_event.substr(3)) - expected.to_vector<double>()[0]) < 1e-5);
  CHECK_THROWS_AS(queue_callback([] {}), std::logic_error);
}

TEST_CASE("hooks fire in reverse order of use, the order a DDP reducer sees") {
  // y = w3 * (w2 * (w1 * x)): w3's gradient is ready first.
  Tensor x = ringflow::testing::seeded({5}, 10);
  Tensor w1 = param({5}, 11), w2 = param({5}, 12), w3 = param({5}, 13);
  std::vector<int> order;
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(1); });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(2); });
  w3.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(3); });
  sum(mul(w3, mul(w2, mul(w1, x)))).backward();
  CHECK(order == std::vector<int>{3, 2, 1});
}

TEST_CASE("gradients flow through views into the base leaf") {
  Tensor x = param({4, 6}, 14);
  Tensor y = x.narrow(1, 2, 3).transpose(0, 1).reshape({-1});
  sum(mul(y, y)).backward();
  Tensor expected = zeros({4, 6}, DType::f64);
  {
    NoGradGuard g;
    expected.narrow(1, 2, 3).copy_(mul(x.detach().narrow(1, 2, 3), 2.0));
  }
  CHECK(all_close(x.grad(), expected));
}

TEST_CASE("requires_grad is refused on integer tensors and non-leaves") {
  Tensor i = zeros({2}, DType::i64);
  CHECK_THROWS_AS(i.requires_grad_(), std::invalid_argument);
  Tensor x = param({2}, 15);
  Tensor y = mul(x, 2.0);
  CHECK_THROWS_AS(y.requires_grad_(false), std::invalid_argument);
}
