// Autograd semantics: diamonds, reuse, accumulation across backward calls, hooks and the
// end-of-backward callback, freed graphs, no_grad and detach, gradient buffers. Expected
// gradients are the closed forms of the expressions (d/dx of x*x is 2x, ...), evaluated by
// the test, or the same network's gradients computed without buffers.
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

// Note [Gradient buffers]: a conv2d, batch_norm and linear network in f32 whose parameters'
// gradient buffers are views of one flat tensor, against the same network without buffers.
namespace {

struct Net {
  std::vector<Tensor> p;  // conv w, conv b, bn w, bn b, linear w, linear b

  Net() {
    const std::vector<Shape> shapes{{4, 3, 3, 3}, {4}, {4}, {4}, {5, 144}, {5}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      p.push_back(ringflow::testing::seeded(shapes[i], 20 + i, DType::f32));
      p.back().requires_grad_();
    }
  }
  Tensor loss() const {
    const Tensor x = ringflow::testing::seeded({2, 3, 6, 6}, 30, DType::f32);
    Tensor h = conv2d(x, p[0], p[1], conv2d_params({1, 1}, {1, 1}));  // (2, 4, 6, 6)
    h = relu(batch_norm(h, Tensor(), Tensor(), p[2], p[3], /*training=*/true));
    const Tensor y = linear(flatten(h, 1), p[4], p[5]);  // (2, 5)
    return sum(mul(y, y));
  }
  // One flat tensor holding every gradient buffer.
  Tensor give_buffers() const {
    int64_t total = 0;
    for (const Tensor& t : p) total += t.numel();
    Tensor flat = zeros({total});
    int64_t offset = 0;
    for (const Tensor& t : p) {
      set_grad_buffer(t, flat.narrow(0, offset, t.numel()).view(t.shape()));
      offset += t.numel();
    }
    return flat;
  }
};

}  // namespace

TEST_CASE("gradient buffers: conv2d, batch_norm and linear compute into them, nothing copied") {
  Net plain, buffered;
  plain.loss().backward();
  const Tensor flat = buffered.give_buffers();
  const int64_t copied = grad_buffer_copy_bytes();
  for (int pass = 0; pass < 2; ++pass) {  // .grad none each time: the buffers are written over
    for (const Tensor& t : buffered.p) t.set_grad(Tensor());
    buffered.loss().backward();
    CHECK(grad_buffer_copy_bytes() == copied);
    for (size_t i = 0; i < plain.p.size(); ++i) {
      CAPTURE(i);
      CHECK(buffered.p[i].grad().shares_storage(flat));
      CHECK(all_close(buffered.p[i].grad(), plain.p[i].grad(), 1e-6, 1e-7));
    }
  }
  // A .grad already there is added into, in place.
  buffered.loss().backward();
  for (size_t i = 0; i < plain.p.size(); ++i) {
    CHECK(buffered.p[i].grad().shares_storage(flat));
    CHECK(all_close(buffered.p[i].grad(), mul(plain.p[i].grad(), 2.0), 1e-6, 1e-7));
  }
  CHECK(grad_buffer_copy_bytes() == copied);
}

TEST_CASE("gradient buffers: a gradient no rule computed there is copied in once, counted") {
  Tensor w = param({3}, 40), v = param({3}, 41);
  Tensor wb = zeros({3}, DType::f64), vb = zeros({3}, DType::f64);
  set_grad_buffer(w, wb);
  set_grad_buffer(v, vb);
  const int64_t copied = grad_buffer_copy_bytes();
  // w twice (two contributions summed before AccumulateGrad), v through an elementwise rule.
  sum(add(mul(w, w), mul(v, 3.0))).backward();
  CHECK(grad_buffer_copy_bytes() == copied + 2 * 3 * 8);
  CHECK(w.grad().shares_storage(wb));
  CHECK(v.grad().shares_storage(vb));
  CHECK(all_close(w.grad(), mul(w.detach(), 2.0)));
  CHECK(all_close(v.grad(), full({3}, 3.0, DType::f64)));
  set_grad_buffer(w, Tensor());  // no buffer: a fresh gradient again
  w.set_grad(Tensor());
  sum(mul(w, w)).backward();
  CHECK_FALSE(w.grad().shares_storage(wb));
}

TEST_CASE("gradient buffers: one of another shape, dtype or layout is refused, naming both") {
  Tensor w = param({2, 3}, 42);
  CHECK_THROWS_WITH_AS(set_grad_buffer(w, zeros({3, 2}, DType::f64)), doctest::Contains("(3, 2)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(set_grad_buffer(w, zeros({2, 3})), doctest::Contains("f32"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(set_grad_buffer(w, zeros({3, 2}, DType::f64).t()),
                       doctest::Contains("not contiguous"), std::invalid_argument);
}
