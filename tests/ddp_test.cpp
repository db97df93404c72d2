// DistributedDataParallel under mpiexec -n 1..3 (issue 5, section 4): DDP against
// single-process training on the full batch (bucket caps 0.001, 1 and 25 MiB, 5 SGD steps,
// computed in the same run on every rank); bitwise identical parameters on every rank;
// no_sync accumulation against the large-batch gradient; the bytes DDP counts per rank per
// iteration against the theory (ring, naive); a model that differs on one rank
// failing on every rank; unused parameters (with and without find_unused_parameters); the
// fp16 compression hook; the noop hook (no communication, local gradients); the bucket
// rebuild from the order gradients became ready (no bucket held back after it; a new DDP
// on the trained state going on bit for bit, as a resumed job must); gradients computed
// into the buckets (no copy); the bucket tuner (every rank choosing the same caps,
// training unchanged by the re-bucketing).
// Each rank starts from a differently seeded model: only DDP's broadcast makes them equal.
// With more ranks than cores each collective is slow (docs/allreduce.md): the cases stay
// small.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/ddp/ddp.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/tests/testing.h"
#include "ringflow/models/registry.h"

// Inside the namespace: comm::ReduceOp hides the kernels' ringflow::ReduceOp.
namespace ringflow::comm {
namespace {

constexpr Timeout kTimeout = std::chrono::seconds(60);  // fail instead of hanging the test

std::shared_ptr<MpiProcessGroup> make_group() {
  MpiProcessGroupOptions o;
  o.checking = true;  // every collective's order and size checked across ranks
  return std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, o);
}

DdpOptions ddp_options(double cap_mb = 25) {
  DdpOptions o;
  o.bucket_cap_mb = cap_mb;
  o.timeout = kTimeout;
  return o;
}

nn::ModulePtr mlp(uint64_t seed, int64_t classes = 10) {
  Generator gen(seed);
  return models::make_model("mlp", classes, {.gen = &gen});
}

struct Batch {
  Tensor x, y;  // x (N, 784), y i64 (N)
};

Batch make_batch(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<double>((i * 7 + seed) % 10);
  return {randn({n, 784}, &gen), from_vector(labels, {n}, DType::i64)};
}

Batch rows(const Batch& b, int64_t begin, int64_t count) {
  return {b.x.narrow(0, begin, count).contiguous(), b.y.narrow(0, begin, count).contiguous()};
}

using testing::max_rel_diff;

std::vector<Tensor> grads(const nn::Module& m) {
  std::vector<Tensor> g;
  for (const Tensor& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

// True when `tensors` hold the same bits on every rank (one allgather).
bool identical_across_ranks(ProcessGroup& pg, const std::vector<Tensor>& tensors) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  const int64_t words = (total + 7) / 8;
  Tensor mine = zeros({words}, DType::i64);
  auto* p = static_cast<char*>(mine.raw_data());
  for (const Tensor& t : tensors) {
    const Tensor c = t.contiguous();
    const size_t bytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
    std::memcpy(p, c.raw_data(), bytes);
    p += bytes;
  }
  Tensor all = zeros({words * pg.size()}, DType::i64);
  CollectiveOptions o;
  o.timeout = kTimeout;
  pg.allgather(all, mine, o)->wait();
  const auto* a = static_cast<const char*>(all.raw_data());
  for (int q = 1; q < pg.size(); ++q) {
    if (std::memcmp(a, a + q * words * 8, static_cast<size_t>(words) * 8) != 0) return false;
  }
  return true;
}

Traffic expected_bucket_traffic(const DistributedDataParallel& ddp, Algorithm algo,
                                size_t elem_bytes) {
  Traffic t;
  const ProcessGroup& pg = ddp.process_group();
  for (const CommEvent& e : ddp.stats().backward.events) {
    t += allreduce_traffic(algo, e.bytes / static_cast<int64_t>(elem_bytes), elem_bytes, pg.size(),
                           pg.rank());
  }
  return t;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

TEST_CASE("ddp: bucket caps 0.001, 1, 25 MiB match single-process training on the full batch") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  constexpr int64_t kGlobal = 12;  // divisible by 1, 2 and 3
  constexpr int kSteps = 5;
  const int64_t local = kGlobal / n;
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(make_batch(kGlobal, 1000 + s));
  const optim::SGDOptions sgd_options{.lr = 0.05, .momentum = 0.9};

  // The reference: one process, the whole batch, rank 0's initial model.
  nn::ModulePtr ref = mlp(100);
  optim::SGD ref_sgd(ref->parameters(), sgd_options);
  for (const Batch& b : batches) {
    cross_entropy((*ref)(b.x), b.y).backward();
    ref_sgd.step();
    ref_sgd.zero_grad();
  }

  struct Case {
    double cap_mb;
    size_t buckets;    // the mlp: 6 tensors, 0.94 MB
    bool set_to_none;  // both ways of zeroing: copy into the bucket, or add in place
  };
  for (const Case c : {Case{0.001, 6, true}, Case{1, 1, false}, Case{25, 1, false}}) {
    CAPTURE(c.cap_mb);
    nn::ModulePtr model = mlp(100 + r);  // differs per rank until DDP broadcasts rank 0's
    DistributedDataParallel ddp(model, pg, ddp_options(c.cap_mb));
    CHECK(ddp.bucket_parameter_names().size() == c.buckets);
    optim::SGD sgd(model->parameters(), sgd_options);
    for (const Batch& global : batches) {
      const Batch b = rows(global, r * local, local);
      cross_entropy(ddp(b.x), b.y).backward();
      const DdpStats st = ddp.stats();
      CHECK(st.backward.synchronized);
      CHECK(st.backward.buckets == static_cast<int>(c.buckets));
      CHECK(st.backward.unused_parameters == 0);
      sgd.step();
      sgd.zero_grad(c.set_to_none);
    }
    CHECK(max_rel_diff(model->parameters(), ref->parameters()) <= 1e-5);
    CHECK(identical_across_ranks(*pg, model->parameters()));
    if (c.buckets == 1) {
      // The gradients are views of the one bucket: no copy out of it.
      const std::vector<Tensor> p = model->parameters();
      for (const Tensor& t : p) CHECK(t.grad().shares_storage(p.front().grad()));
    }
  }
}

TEST_CASE("ddp: no_sync over K micro-batches equals the large-batch gradient") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  constexpr int kMicro = 3, kRows = 2;  // per rank and micro-batch
  const Batch global = make_batch(int64_t{n} * kMicro * kRows, 7);

  nn::ModulePtr ref = mlp(200);
  cross_entropy((*ref)(global.x), global.y).backward();

  nn::ModulePtr model = mlp(200 + r);
  DistributedDataParallel ddp(model, pg, ddp_options(0.25));
  for (int k = 0; k < kMicro; ++k) {
    // Rank r's share of micro-batch k; the loss of a micro-batch weighs 1/K.
    const Batch b = rows(global, (int64_t{k} * n + r) * kRows, kRows);
    if (k + 1 < kMicro) {
      auto guard = ddp.no_sync();
      div(cross_entropy(ddp(b.x), b.y), double{kMicro}).backward();
      CHECK_FALSE(ddp.stats().backward.synchronized);
      CHECK(ddp.stats().traffic().sent == 0);
    } else {
      div(cross_entropy(ddp(b.x), b.y), double{kMicro}).backward();
      CHECK(ddp.stats().backward.synchronized);
      CHECK((n == 1 || ddp.stats().traffic().sent > 0));
    }
  }
  CHECK(max_rel_diff(grads(*model), grads(*ref)) <= 1e-5);
}

TEST_CASE("ddp: bytes per rank per iteration equal the theory (ring, naive)") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  const Batch b = make_batch(4, 50 + r);
  for (Algorithm algo : {Algorithm::ring, Algorithm::naive}) {
    CAPTURE(algorithm_name(algo));
    // The mlp in 3 buckets, rebuilt in the order the gradients come (each layer's weight,
    // then its bias): fc3 and fc2, fc1.weight, fc1.bias.
    DdpOptions o = ddp_options(0.25);
    o.algorithm = algo;
    DistributedDataParallel ddp(mlp(300), pg, o);
    cross_entropy(ddp(b.x), b.y).backward();
    const DdpStats st = ddp.stats();
    REQUIRE(st.backward.events.size() == 3);
    const Traffic want = expected_bucket_traffic(ddp, algo, 4);
    CHECK(st.traffic().sent == want.sent);
    CHECK(st.traffic().received == want.received);
    CHECK((n == 1 || st.traffic().measured));
    CHECK(st.broadcast.traffic.sent == 0);  // the mlp has no buffers

    // Every gradient starts 16-byte aligned in its bucket (cuDNN needs it on a GPU).
    for (const Tensor& p : ddp.module().parameters())
      CHECK(reinterpret_cast<uintptr_t>(p.grad().data<float>()) % 16 == 0);
    // And the closed forms on S = the buckets' bytes: the gradients, and 2 floats after
    // fc3.bias (10 floats), which its bucket holds before fc2's gradients.
    const int64_t s = st.backward.gradient_bytes;
    CHECK(s == 4 * (models::make_model("mlp")->num_parameters() + 2));
    if (algo == Algorithm::ring) {
      const double theory = 2.0 * (n - 1) / n * static_cast<double>(s);
      // Uneven chunks: at most one element per chunk boundary and bucket.
      CHECK(std::fabs(static_cast<double>(st.traffic().sent) - theory) <= 2 * 4 * 3);
    } else {
      const int64_t total = st.traffic().sent + st.traffic().received;
      CHECK(total == (n == 1 ? 0 : r == 0 ? 2 * (n - 1) * s : 2 * s));
    }
    CHECK(st.comm_ms() >= 0);
    CHECK(st.overlap() >= 0);
    CHECK(st.overlap() <= 1);
  }
}

TEST_CASE("ddp: a model that differs on one rank fails on every rank, naming it") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  if (n == 1) return;
  nn::ModulePtr model = mlp(1, r == n - 1 ? 11 : 10);  // the last rank's head is larger
  try {
    DistributedDataParallel ddp(model, pg, ddp_options());
    FAIL_CHECK("DistributedDataParallel accepted models that differ");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("not the same on every rank") != std::string::npos);
    CHECK(msg.find("rank 0 has 'parameter fc3.weight f32 (10, 128)'") != std::string::npos);
    CHECK(msg.find(cat("rank ", n - 1, " has 'parameter fc3.weight f32 (11, 128)'")) !=
          std::string::npos);
    CHECK(msg.find(cat("differ from rank 0: ", n - 1)) != std::string::npos);
  }
  // Every rank got there (no hang) and the group goes on.
  CollectiveOptions o;
  o.timeout = kTimeout;
  pg->barrier(o)->wait();
}

TEST_CASE("ddp: BatchNorm buffers are rank 0's before every training forward; eval is local") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  Generator data(3);
  const Tensor x = randn({4, 1, 28, 28}, &data);  // the same on every rank
  const Tensor y = from_vector({1, 2, 3, 4}, {4}, DType::i64);
  for (bool broadcast : {true, false}) {
    CAPTURE(broadcast);
    Generator gen(21 + r);
    nn::ModulePtr model = models::make_model("small_cnn", 0, {.gen = &gen});
    DdpOptions o = ddp_options();
    o.broadcast_buffers = broadcast;
    DistributedDataParallel ddp(model, pg, o);
    optim::SGD sgd(model->parameters(), {.lr = 0.1});
    {
      NoGradGuard no_grad;  // the ranks' statistics drift apart (as with their own data)
      for (Tensor b : model->buffers()) b.fill_(r + 1);
    }
    cross_entropy(ddp(x), y).backward();
    sgd.step();
    // Same input, so the same statistics after forward exactly when they were the same
    // before it.
    CHECK(identical_across_ranks(*pg, model->buffers()) == (broadcast || n == 1));
    CHECK(identical_across_ranks(*pg, model->parameters()));  // conv gradients in buckets
    if (broadcast && n > 1) {
      CHECK(ddp.stats().broadcast.traffic.received == (r == 0 ? 0 : 2 * 4 * (16 + 32) + 2 * 8));
    }
    // Rank 0 alone evaluates: no collective, or the barrier below would mismatch.
    if (r == 0) {
      model->eval();
      CHECK(ddp(x).shape() == Shape{4, 10});
      model->train();
    }
    CollectiveOptions b;
    b.timeout = kTimeout;
    pg->barrier(b)->wait();
  }
}

namespace {

// a(x) + b(x) where use_b, never used: "never".
class TwoHeads : public nn::Module {
 public:
  TwoHeads(bool use_b, Generator* gen) : Module("TwoHeads"), use_b_(use_b) {
    a = register_module("a", std::make_shared<nn::Linear>(4, 3, true, gen));
    b = register_module("b", std::make_shared<nn::Linear>(4, 3, true, gen));
    never = register_module("never", std::make_shared<nn::Linear>(4, 3, true, gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = (*a)(x);
    return use_b_ ? add(y, (*b)(x)) : y;
  }
  std::shared_ptr<nn::Linear> a, b, never;

 private:
  bool use_b_;
};

}  // namespace

TEST_CASE("ddp: parameters without a gradient never hang the job") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  for (bool find_unused : {false, true}) {
    CAPTURE(find_unused);
    Generator gen(5);
    auto model = std::make_shared<TwoHeads>(/*use_b=*/r == 0, &gen);
    DdpOptions o = ddp_options(0);  // a bucket per parameter: unused ones sit among used ones
    o.find_unused_parameters = find_unused;
    DistributedDataParallel ddp(model, pg, o);
    for (int it = 0; it < 2; ++it) {  // before and after the rebuild
      // Rank q's input is all q+1: the averaged gradients have closed forms.
      const Tensor x = full({2, 4}, r + 1);
      sum(ddp(x)).backward();
      // Unused: never.* everywhere, b.* on every rank but 0.
      CHECK(ddp.stats().backward.unused_parameters == (r == 0 ? 2 : 4));
      // d sum / d a.weight = sum over the 2 rows of x: 2 (q + 1), averaged: n + 1.
      CHECK(model->a->weight.grad().to_vector<double>()[0] == doctest::Approx(n + 1));
      // Only rank 0 uses b: 2 / n everywhere.
      CHECK(model->b->weight.grad().to_vector<double>()[5] == doctest::Approx(2.0 / n));
      CHECK(model->b->bias.grad().to_vector<double>()[1] == doctest::Approx(2.0 / n));
      CHECK(model->never->weight.grad().to_vector<double>()[0] == 0);
      model->zero_grad(/*set_to_none=*/it == 0);
    }
  }
}

TEST_CASE("ddp: the fp16 compression hook halves the bytes, gradients within f16 rounding") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  DdpOptions o = ddp_options(0.25);
  o.algorithm = Algorithm::ring;
  o.rebuild_buckets = false;  // the same buckets for both runs
  nn::ModulePtr model = mlp(400);
  DistributedDataParallel ddp(model, pg, o);
  const Batch b = make_batch(4, 60 + r);

  cross_entropy(ddp(b.x), b.y).backward();
  const std::vector<Tensor> g32 = grads(*model);
  const Traffic t32 = ddp.stats().traffic();
  model->zero_grad(/*set_to_none=*/false);

  ddp.register_comm_hook(std::make_shared<Fp16CompressionHook>());
  cross_entropy(ddp(b.x), b.y).backward();
  const std::vector<Tensor> g16 = grads(*model);
  const Traffic t16 = ddp.stats().traffic();

  CHECK(t16.sent * 2 == t32.sent);
  CHECK(t16.received * 2 == t32.received);
  // f16 keeps 11 significant bits; each of the n - 1 additions rounds again.
  const double tolerance = n * std::ldexp(1.0, -10);
  CHECK(max_rel_diff(g16, g32) <= tolerance);
  if (n > 1) CHECK(max_rel_diff(g16, g32) > 0);  // the compressed path really ran
  CHECK(identical_across_ranks(*pg, g16));
}

TEST_CASE("ddp: the noop hook leaves each rank's local gradient, sends nothing") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  DdpOptions o = ddp_options(0.25);  // 3 buckets: the bookkeeping runs as with communication
  o.comm_hook = make_comm_hook(CommHookKind::noop);
  nn::ModulePtr model = mlp(500);
  nn::ModulePtr ref = mlp(500);  // the same seed everywhere: DDP's broadcast changes nothing
  DistributedDataParallel ddp(model, pg, o);
  for (int it = 0; it < 2; ++it) {  // the second after the bucket rebuild
    CAPTURE(it);
    const Batch b = make_batch(4, 80 + 10 * it + r);  // each rank its own data
    cross_entropy(ddp(b.x), b.y).backward();
    cross_entropy((*ref)(b.x), b.y).backward();
    const DdpStats st = ddp.stats();
    CHECK(st.backward.synchronized);
    CHECK(st.backward.events.size() == 3);
    CHECK(st.traffic().sent == 0);
    CHECK(st.traffic().received == 0);
    CHECK(max_rel_diff(grads(*model), grads(*ref)) == 0);  // not averaged, not scaled
    if (n > 1) CHECK_FALSE(identical_across_ranks(*pg, grads(*model)));
    model->zero_grad(/*set_to_none=*/false);
    ref->zero_grad(/*set_to_none=*/true);
  }
}

namespace {

// Registers the head before the body that feeds it, so that reverse registration order is
// not the order backward produces the gradients in.
class HeadFirst : public nn::Module {
 public:
  explicit HeadFirst(Generator* gen, int64_t in = 4, int64_t hidden = 8, int64_t out = 3)
      : Module("HeadFirst") {
    head = register_module("head", std::make_shared<nn::Linear>(hidden, out, true, gen));
    body = register_module("body", std::make_shared<nn::Linear>(in, hidden, true, gen));
  }
  Tensor forward(const Tensor& x) override { return (*head)(relu((*body)(x))); }
  std::shared_ptr<nn::Linear> head, body;
};

}  // namespace

TEST_CASE("ddp: buckets are rebuilt in the order the gradients became ready") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  Generator gen(9);
  auto model = std::make_shared<HeadFirst>(&gen);
  Generator ref_gen(9);
  auto ref = std::make_shared<HeadFirst>(&ref_gen);
  DistributedDataParallel ddp(model, pg, ddp_options(0));
  // Reverse registration order: the body's parameters first.
  CHECK(starts_with(ddp.bucket_parameter_names().front().front(), "body."));

  Generator data(11);
  const Tensor x = randn({int64_t{2} * n, 4}, &data);
  sum(ddp(x.narrow(0, 2 * r, 2).contiguous())).backward();
  // The head's gradients came first in backward: its buckets now lead.
  const auto names = ddp.bucket_parameter_names();
  REQUIRE(names.size() == 4);
  CHECK(starts_with(names[0].front(), "head."));
  CHECK(starts_with(names[1].front(), "head."));
  CHECK(starts_with(names[3].front(), "body."));
  // The gradients moved into the new buckets intact; the next iteration uses them.
  div(sum((*ref)(x)), static_cast<double>(n)).backward();
  CHECK(max_rel_diff(grads(*model), grads(*ref)) <= 1e-6);
  model->zero_grad(false);
  ref->zero_grad(false);
  sum(ddp(x.narrow(0, 2 * r, 2).contiguous())).backward();
  div(sum((*ref)(x)), static_cast<double>(n)).backward();
  CHECK(max_rel_diff(grads(*model), grads(*ref)) <= 1e-6);
  const int64_t first = ddp.stats().backward.events.front().bytes / 4;  // f32
  CHECK((first == 3 || first == 24));  // head.bias or head.weight
  CHECK(ddp.stats().backward.held_back == 0);  // each bucket launched as it completed
}

TEST_CASE("ddp: buckets in reverse registration order hold back the ones ready first") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  Generator gen(9);
  auto model = std::make_shared<HeadFirst>(&gen);
  DdpOptions o = ddp_options(0);
  o.rebuild_buckets = false;  // the body's buckets first, though the head's gradients come first
  DistributedDataParallel ddp(model, pg, o);
  Generator data(11);
  const Tensor x = randn({int64_t{2} * n, 4}, &data);
  sum(ddp(x.narrow(0, 2 * r, 2).contiguous())).backward();
  CHECK(ddp.stats().backward.held_back >= 2);  // the head's weight and bias wait for the body
}

TEST_CASE("ddp: a new DistributedDataParallel on the trained state goes on bit for bit (a resume)") {
  // The first synchronised backward of every DDP reduces in the rebuilt buckets, so a job
  // restarted from a checkpoint sums as the uninterrupted one did; at 3 ranks the ring's
  // order of addition per element depends on where the buckets begin.
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  constexpr int kSteps = 4, kRestartAt = 2;
  DdpOptions o = ddp_options();
  o.algorithm = Algorithm::ring;
  const optim::SGDOptions sgd_options{.lr = 0.05, .momentum = 0.9};
  auto train = [&](bool restart) {
    Generator gen(17);
    auto model = std::make_shared<HeadFirst>(&gen, 16, 48, 8);
    optim::SGD sgd(model->parameters(), sgd_options);
    auto ddp = std::make_unique<DistributedDataParallel>(model, pg, o);
    for (int s = 0; s < kSteps; ++s) {
      if (restart && s == kRestartAt) ddp = std::make_unique<DistributedDataParallel>(model, pg, o);
      Generator data(300 + s);
      const Tensor x = randn({int64_t{3} * n, 16}, &data);
      sum(mul((*ddp)(x.narrow(0, 3 * r, 3).contiguous()), 0.1)).backward();
      sgd.step();
      sgd.zero_grad();
    }
    return model->parameters();
  };
  const std::vector<Tensor> whole = train(false), resumed = train(true);
  CHECK(max_rel_diff(resumed, whole) == 0);
}

TEST_CASE("ddp: backward computes the gradients into the buckets: no copy in, results as the average of each rank's") {
  // small_cnn (convolutions, BatchNorm, linear): each rank's BatchNorm normalises its own
  // share, so the reference is the mean of the shares' losses in one process.
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  constexpr int64_t kLocal = 2;
  auto small_cnn = [](uint64_t seed) {
    Generator gen(seed);
    return models::make_model("small_cnn", 10, {.gen = &gen});
  };
  nn::ModulePtr ref = small_cnn(700), model = small_cnn(700 + r);
  const optim::SGDOptions sgd_options{.lr = 0.05, .momentum = 0.9};
  optim::SGD ref_sgd(ref->parameters(), sgd_options);
  DistributedDataParallel ddp(model, pg, ddp_options(0.02));  // several buckets
  optim::SGD sgd(model->parameters(), sgd_options);
  const int64_t copied = grad_buffer_copy_bytes();
  for (int s = 0; s < 3; ++s) {
    Generator data(900 + s);
    const Tensor x = randn({kLocal * n, 1, 28, 28}, &data);
    std::vector<double> labels(static_cast<size_t>(kLocal * n));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<double>((i * 3 + s) % 10);
    const Tensor y = from_vector(labels, {kLocal * n}, DType::i64);
    Tensor ref_loss;
    for (int q = 0; q < n; ++q) {
      const Tensor l = cross_entropy((*ref)(x.narrow(0, q * kLocal, kLocal).contiguous()),
                                     y.narrow(0, q * kLocal, kLocal).contiguous());
      ref_loss = q == 0 ? l : add(ref_loss, l);
    }
    div(ref_loss, static_cast<double>(n)).backward();
    ref_sgd.step();
    ref_sgd.zero_grad();
    cross_entropy(ddp(x.narrow(0, r * kLocal, kLocal).contiguous()),
                  y.narrow(0, r * kLocal, kLocal).contiguous())
        .backward();
    CHECK(ddp.stats().backward.buckets > 1);
    sgd.step();
    sgd.zero_grad();  // .grad none: the next backward writes over the buckets
  }
  CHECK(grad_buffer_copy_bytes() == copied);
  CHECK(max_rel_diff(model->parameters(), ref->parameters()) <= 1e-5);
  CHECK(identical_across_ranks(*pg, model->parameters()));
}

TEST_CASE("ddp: tuned bucket caps: every candidate tried, one choice on every rank, training unchanged") {
  auto pg = make_group();
  const int n = pg->size(), r = pg->rank();
  constexpr int64_t kGlobal = 12;
  constexpr int kSteps = 8;  // 1 before the rebuild, 2 x (1 + 1) for the caps, 2 for the second round
  const int64_t local = kGlobal / n;
  const optim::SGDOptions sgd_options{.lr = 0.05, .momentum = 0.9};
  nn::ModulePtr ref = mlp(100);
  optim::SGD ref_sgd(ref->parameters(), sgd_options);
  nn::ModulePtr model = mlp(100 + r);
  DdpOptions o = ddp_options();
  o.tune_bucket_caps = true;
  o.bucket_tuner = {.caps_mb = {0.01, 2}, .warmup = 1, .measured = 1};  // the mlp: 0.94 MB
  DistributedDataParallel ddp(model, pg, o);
  optim::SGD sgd(model->parameters(), sgd_options);
  std::vector<size_t> bucket_counts;  // per iteration: the buckets its backward used
  for (int s = 0; s < kSteps; ++s) {
    const Batch global = make_batch(kGlobal, 2000 + s);
    cross_entropy((*ref)(global.x), global.y).backward();
    ref_sgd.step();
    ref_sgd.zero_grad();
    const Batch b = rows(global, r * local, local);
    cross_entropy(ddp(b.x), b.y).backward();
    bucket_counts.push_back(static_cast<size_t>(ddp.stats().backward.buckets));
    sgd.step();
    sgd.zero_grad(s % 2 == 0);
  }
  REQUIRE(ddp.bucket_tuning() != nullptr);
  const BucketTuning t = *ddp.bucket_tuning();
  REQUIRE(t.done());
  // 0.01 MiB (one bucket per tensor but the biases'), 2 MiB with a 1 MiB first bucket (the
  // mlp's 0.94 MB in one), then 2 MiB alone when it won.
  REQUIRE(t.tried.size() >= 2);
  CHECK(t.tried[0].cap_mb == 0.01);
  CHECK(t.tried[1].first_mb == 1);
  CHECK(t.tried[1].cap_mb == 2);
  CHECK(bucket_counts[2] > 1);   // iterations 1-2: the first candidate's buckets
  CHECK(bucket_counts[3] == 1);  // iterations 3-4: the second's
  const size_t best = static_cast<size_t>(
      std::min_element(t.ms.begin(), t.ms.end()) - t.ms.begin());
  CHECK(static_cast<size_t>(t.chosen) == best);
  // The same measurements and choice everywhere.
  Tensor tried = from_vector(t.ms, {static_cast<int64_t>(t.ms.size())}, DType::f64);
  CHECK(identical_across_ranks(*pg, {tried, full({1}, static_cast<double>(t.chosen))}));
  CHECK(max_rel_diff(model->parameters(), ref->parameters()) <= 1e-5);
  CHECK(identical_across_ranks(*pg, model->parameters()));
}

}  // namespace ringflow::comm
