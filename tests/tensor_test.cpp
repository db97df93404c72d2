// Tensor basics: views share storage, creation, layouts, dtype and broadcasting semantics,
// reductions, matmul, cat and gather. Expected values are computed here with plain loops
// over the input values, independently of the kernels.
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ringflow/framework/op_profile.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;
using ringflow::testing::all_close;
using ringflow::testing::seeded;

TEST_CASE("views share storage with their base") {
  Tensor x = arange(0, 24, 1, DType::f32).reshape({2, 3, 4});
  Tensor v = x.permute({2, 0, 1});
  CHECK(v.shape() == Shape{4, 2, 3});
  CHECK(v.strides() == Shape{1, 12, 4});
  CHECK_FALSE(v.is_contiguous());
  CHECK(v.shares_storage(x));
  Tensor n = x.narrow(2, 1, 2);
  {
    NoGradGuard g;
    n.fill_(-1.0);
  }
  const auto values = x.to_vector<float>();
  for (int i = 0; i < 24; ++i) CHECK(values[i] == ((i % 4 == 1 || i % 4 == 2) ? -1.0f : float(i)));
  Tensor e = arange(3, DType::f32).unsqueeze(0).expand({4, 3});
  CHECK(e.strides() == Shape{0, 1});
  CHECK(e.contiguous().to_vector<float>() == std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2});
  // view() refuses what needs a copy; reshape() copies.
  CHECK_THROWS_AS(v.view({24}), std::invalid_argument);
  Tensor r = v.reshape({24});
  CHECK_FALSE(r.shares_storage(x));
  CHECK(x.reshape({6, 4}).shares_storage(x));
}

TEST_CASE("from_blob views memory the caller owns, and releases it once") {
  std::vector<float> memory(12);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<float>(i);
  int releases = 0;
  {
    // A (3, 2) view with strides (4, 2): every other element of the first 3 rows of 4.
    Tensor t = from_blob(memory.data(), {3, 2}, {4, 2}, DType::f32, Device::cpu(), [&] { ++releases; });
    CHECK(t.raw_data() == memory.data());
    CHECK(t.storage()->nbytes() == 11 * sizeof(float));  // up to the last element viewed
    CHECK(t.contiguous().to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
    CHECK(t.storage()->shared());
    CHECK(t.kernel_view().derived == nullptr);  // others may write it: nothing cached
    Tensor alias = t.t();
    t = Tensor();
    CHECK(releases == 0);  // the view still uses it
    memory[2] = 40;
    CHECK(alias.contiguous().to_vector<float>()[3] == 40);  // alias[1][0] is t[0][1], memory[2]
  }
  CHECK(releases == 1);
  CHECK(from_blob(memory.data(), {2, 6}, {}, DType::f32, Device::cpu(), nullptr).strides() == Shape{6, 1});
  CHECK_THROWS_WITH_AS(from_blob(memory.data(), {3}, {-1}, DType::f32, Device::cpu(), nullptr),
                       doctest::Contains("must not be negative"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(from_blob(memory.data(), {3}, {1, 1}, DType::f32, Device::cpu(), nullptr),
                       doctest::Contains("2 strides for the 1 dims"), std::invalid_argument);
  Tensor own = zeros({2});
  CHECK_FALSE(own.storage()->shared());
  CHECK(own.kernel_view().derived != nullptr);
  own.storage()->mark_shared();
  CHECK(own.kernel_view().derived == nullptr);
}

TEST_CASE("creation and seeded random tensors") {
  CHECK(zeros({2, 2}).to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(full({3}, 2.5, DType::f64).to_vector<double>() == std::vector<double>(3, 2.5));
  CHECK(arange(1, 2, 0.25, DType::f64).to_vector<double>() == std::vector<double>{1, 1.25, 1.5, 1.75});
  Generator g1(42), g2(42), g3(43);
  const auto a = rand({100}, &g1).to_vector<float>(), b = rand({100}, &g2).to_vector<float>();
  CHECK(a == b);
  CHECK(a != rand({100}, &g3).to_vector<float>());
  for (float v : a) CHECK((v >= 0.0f && v < 1.0f));
  // randn: sample moments of 20000 draws within 5 standard errors of N(0, 1).
  const auto n = randn({20000}, &g1, DType::f64).to_vector<double>();
  double m = 0, s = 0;
  for (double v : n) m += v;
  m /= n.size();
  for (double v : n) s += (v - m) * (v - m);
  s /= n.size() - 1;
  CHECK(std::fabs(m) < 5 / std::sqrt(20000.0));
  CHECK(std::fabs(s - 1) < 5 * std::sqrt(2.0 / 20000));
}

TEST_CASE("dtype conversions round-trip exactly where representable") {
  const std::vector<double> exact{0, 1, -2, 0.5, 3.75, -1024, 65504};
  Tensor t = from_vector(exact, {7}, DType::f64);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    if (d == DType::bf16) continue;  // 65504 and 3.75 are fine, but checked below with bf16 values
    Tensor back = t.to(d).to(DType::f64);
    if (!is_floating(d)) {
      CHECK(back.to_vector<double>() == std::vector<double>{0, 1, -2, 0, 3, -1024, 65504});
    } else {
      CHECK(back.to_vector<double>() == exact);
    }
  }
  const std::vector<double> bf{0, 1, -2, 0.5, 3.75, -1024, 65536};
  CHECK(from_vector(bf, {7}, DType::f64).to(DType::bf16).to(DType::f64).to_vector<double>() == bf);
}

TEST_CASE("broadcasting elementwise ops match loops") {
  Tensor a = seeded({2, 3, 1}, 1), b = seeded({3, 4}, 2);
  Tensor c = add(a, b);
  CHECK(c.shape() == Shape{2, 3, 4});
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>(), vc = c.to_vector<double>();
  const auto vm = maximum(a, b).to_vector<double>(), vp = mul(a, b).to_vector<double>();
  const auto vlt = lt(a, b).to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        const double x = va[i * 3 + j], y = vb[j * 4 + k];
        const int o = (i * 3 + j) * 4 + k;
        CHECK(vc[o] == x + y);
        CHECK(vm[o] == std::max(x, y));
        CHECK(vp[o] == x * y);
        CHECK(vlt[o] == (x < y ? 1.0 : 0.0));
      }
  Tensor w = where(gt(a, scalar_tensor(0, DType::f64)), a, b);
  const auto vw = w.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        CHECK(vw[(i * 3 + j) * 4 + k] == (va[i * 3 + j] > 0 ? va[i * 3 + j] : vb[j * 4 + k]));
}

TEST_CASE("reductions match loops") {
  Tensor x = seeded({3, 4, 5}, 3);
  const auto v = x.to_vector<double>();
  auto at = [&](int i, int j, int k) { return v[(i * 4 + j) * 5 + k]; };
  const auto s = sum(x, {1}).to_vector<double>(), m = mean(x, {0, 2}).to_vector<double>();
  const auto mx = amax(x, {2}).to_vector<double>(), vr = var(x, {1}).to_vector<double>();
  const auto am = argmax(x, 1).to_vector<int64_t>();
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) {
      double acc = 0, best = -1e300, sq = 0;
      int64_t arg = 0;
      for (int j = 0; j < 4; ++j) {
        acc += at(i, j, k);
        if (at(i, j, k) > best) { best = at(i, j, k); arg = j; }
      }
      for (int j = 0; j < 4; ++j) sq += (at(i, j, k) - acc / 4) * (at(i, j, k) - acc / 4);
      CHECK(s[i * 5 + k] == doctest::Approx(acc).epsilon(1e-12));
      CHECK(vr[i * 5 + k] == doctest::Approx(sq / 3).epsilon(1e-12));
      CHECK(am[i * 5 + k] == arg);
    }
  for (int j = 0; j < 4; ++j) {
    double acc = 0;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) acc += at(i, j, k);
    CHECK(m[j] == doctest::Approx(acc / 15).epsilon(1e-12));
  }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      double best = -1e300;
      for (int k = 0; k < 5; ++k) best = std::max(best, at(i, j, k));
      CHECK(mx[i * 4 + j] == best);
    }
  CHECK(sum(x).dim() == 0);
  CHECK(sum(x, {0}, true).shape() == Shape{1, 4, 5});
  // argmax: the first of equal maxima wins.
  CHECK(argmax(from_vector({1, 3, 3, 2}, {4}), 0).item() == 1);
}

TEST_CASE("matmul matches loops, with transposed and broadcast operands") {
  Tensor a = seeded({2, 1, 3, 4}, 4), b = seeded({5, 4}, 5).t();  // b: (4, 5) strided
  Tensor bb = seeded({3, 4, 5}, 6);
  Tensor c = matmul(a, bb);
  CHECK(c.shape() == Shape{2, 3, 3, 5});
  const auto va = a.to_vector<double>(), vb = bb.to_vector<double>(), vc = c.to_vector<double>();
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) {
          double acc = 0;
          for (int k = 0; k < 4; ++k) acc += va[(p * 3 + i) * 4 + k] * vb[(q * 4 + k) * 5 + j];
          CHECK(vc[((p * 3 + q) * 3 + i) * 5 + j] == doctest::Approx(acc).epsilon(1e-12));
        }
  const Tensor c2 = matmul(a, b);
  CHECK(all_close(c2, matmul(a, b.contiguous()), 1e-12));
  CHECK(matmul(seeded({4}, 7), seeded({4}, 8)).dim() == 0);
}

TEST_CASE("cat and gather") {
  Tensor a = arange(0, 6, 1, DType::f64).reshape({2, 3}), b = arange(6, 10, 1, DType::f64).reshape({2, 2});
  CHECK(cat({a, b}, 1).to_vector<double>() == std::vector<double>{0, 1, 2, 6, 7, 3, 4, 5, 8, 9});
  Tensor idx = from_vector({2, 0, 1, 1}, {2, 2}, DType::i64);
  CHECK(gather(a, 1, idx).to_vector<double>() == std::vector<double>{2, 0, 4, 4});
}

TEST_CASE("channels-last copies keep values and NHWC strides") {
  Tensor x = seeded({2, 3, 4, 5}, 9);
  Tensor cl = x.channels_last();
  CHECK(cl.is_channels_last());
  CHECK(cl.strides() == Shape{60, 1, 15, 3});
  CHECK(all_close(cl.contiguous(), x, 0, 0));
  Tensor y = relu(cl);
  CHECK(y.is_channels_last());  // elementwise ops keep the layout
}

TEST_CASE("printing") {
  std::ostringstream out;
  out << from_vector({1, 2.5, -3}, {3});
  CHECK(out.str() == "tensor([1.0000, 2.5000, -3.0000])");
  CHECK(arange(4, DType::i64).str() == "tensor([0, 1, 2, 3], dtype=i64)");
  CHECK(zeros({2, 2}, DType::f64).str() == "tensor([[0.0000, 0.0000],\n        [0.0000, 0.0000]], dtype=f64)");
}

TEST_CASE("safetensors round trip") {
  const std::string path = "/tmp/ringflow_tensor_test.safetensors";
  Tensor a = seeded({3, 4}, 10, DType::f32), b = arange(5, DType::i64);
  save_safetensors(path, {{"a", a}, {"b", b}}, {{"note", "x"}});
  SafetensorsFile f = load_safetensors(path);
  CHECK(all_close(f.at("a"), a, 0, 0));
  CHECK(f.at("b").to_vector<int64_t>() == b.to_vector<int64_t>());
  CHECK(f.metadata.at("note") == "x");
  CHECK_THROWS_WITH_AS(f.at("c"), doctest::Contains("no tensor named 'c'"), std::runtime_error);
  CHECK_THROWS_WITH_AS(load_safetensors("/nonexistent/x.safetensors"), doctest::Contains("/nonexistent/x.safetensors"), std::runtime_error);
}

TEST_CASE("copy_ refuses overlapping source and destination, and a repeating destination") {
  Tensor x = arange(0.0, 10.0, 1.0, DType::f32);
  CHECK_THROWS_WITH(x.narrow(0, 0, 5).copy_(x.narrow(0, 2, 5)), doctest::Contains("overlap in memory"));
  CHECK_THROWS_WITH(x.narrow(0, 3, 5).copy_(x.narrow(0, 0, 5)), doctest::Contains("overlap in memory"));
  x.copy_(x);  // the same view: nothing to do
  x.narrow(0, 0, 5).copy_(x.narrow(0, 5, 5));  // disjoint halves of one storage
  CHECK(x.to_vector<float>() == std::vector<float>{5, 6, 7, 8, 9, 5, 6, 7, 8, 9});
  Tensor m = arange(0.0, 6.0, 1.0, DType::f32).reshape({3, 2});
  m.select(1, 0).copy_(m.select(1, 1));  // interleaved columns share no element
  CHECK(m.to_vector<float>() == std::vector<float>{1, 1, 3, 3, 5, 5});
  Tensor row = zeros({1, 3}, DType::f32);
  CHECK_THROWS_WITH(row.expand({4, 3}).copy_(ones({4, 3}, DType::f32)),
                    doctest::Contains("refers to a single memory location"));
}

TEST_CASE("op profiling counts each kernel call under its op's name, only while on") {
  const Tensor a = seeded({4, 5}, 1), b = seeded({4, 5}, 2);
  reset_op_times();
  (void)(a + b);  // not profiled
  set_op_profiling(true);
  (void)relu(a + b);
  (void)(a + b);
  set_op_profiling(false);
  (void)(a + b);
  std::map<std::string, OpTime> by_name;
  for (const OpTime& t : op_times()) by_name[t.op] = t;
  REQUIRE(by_name.count("add") == 1);
  CHECK(by_name.at("add").calls == 2);
  REQUIRE(by_name.count("relu") == 1);
  CHECK(by_name.at("relu").calls == 1);
  CHECK(by_name.at("add").total_ms >= 0);
  reset_op_times();
  CHECK(op_times().empty());
}

TEST_CASE("op profiling by shape names each call's dtype and operand shapes") {
  const Tensor a = seeded({4, 5}, 1), b = seeded({5}, 2), c = seeded({2, 3}, 3);
  const Tensor nhwc = seeded({2, 3, 4, 5}, 4).channels_last();
  reset_op_times();
  set_op_profiling(true, /*by_shape=*/true);
  (void)(a + b);
  (void)(a + b);
  (void)(c + c);
  (void)(nhwc + nhwc);
  set_op_profiling(false);
  std::map<std::string, int64_t> calls;
  for (const OpTime& t : op_times()) calls[t.op] = t.calls;
  CHECK(calls.size() == 3);
  CHECK(calls["add f64 (4, 5) (4, 5) (4, 5)strided"] == 2);  // out, a, b as the kernel sees them (broadcast)
  CHECK(calls["add f64 (2, 3) (2, 3) (2, 3)"] == 1);
  CHECK(calls["add f64 (2, 3, 4, 5)nhwc (2, 3, 4, 5)nhwc (2, 3, 4, 5)nhwc"] == 1);  // the output keeps the layout
  reset_op_times();
  // A dtype where it changes; optional operands (a bias) named where given.
  const Tensor x = seeded({1, 2, 5, 5}, 5), w = seeded({3, 2, 3, 3}, 6), bias = seeded({3}, 7);
  set_op_profiling(true, /*by_shape=*/true);
  (void)a.to(DType::f32);
  (void)conv2d(x, w, bias);
  (void)conv2d(x, w, Tensor());
  set_op_profiling(false);
  calls.clear();
  for (const OpTime& t : op_times()) calls[t.op] = t.calls;
  CHECK(calls["copy f32 (4, 5) f64 (4, 5)"] == 1);
  int with_bias = 0, without = 0;  // y's layout is the memory format's choice: not checked here
  for (const auto& [name, n] : calls) {
    if (name.rfind("conv2d_forward f64 (1, 3, 3, 3)", 0) != 0) continue;
    with_bias += name.ends_with(" (1, 2, 5, 5) (3, 2, 3, 3) (3,)");
    without += name.ends_with(" (1, 2, 5, 5) (3, 2, 3, 3)");
  }
  CHECK(with_bias == 1);
  CHECK(without == 1);
  reset_op_times();
  set_op_profiling(true);  // by op again
  (void)(a + b);
  set_op_profiling(false);
  REQUIRE(op_times().size() == 1);
  CHECK(op_times()[0].op == "add");
  reset_op_times();
}
