// The training app's gradient synchronisation (apps/gradient_sync.h) under mpiexec -n 2 and
// 3 (issue 5, section 4): with a model without batch norm and the same global batch,
// gather-scatter (our naive allreduce, and the group's reduce and broadcast as over NCCL),
// allreduce with each algorithm (naive, tree, recursive doubling, ring, MPI's own) and ddp
// (a bucket per parameter, one bucket for all) match single-process training on the full
// batch within 1e-5 relative after 5 SGD steps, and every rank holds bitwise identical
// parameters. The steps are the app's: GradientSync's forward,
// backward, after_backward, the optimizer, GradientSync's zero_grad.
// Each rank starts from a differently seeded model: only the strategy's broadcast makes
// them equal. The model has two parameter tensors, so that an allreduce per gradient stays
// cheap: about 110 collectives in all, each slow with more ranks than cores
// (docs/allreduce.md).
// Also the device and backend choice of apps/train for a machine with GPUs (pure functions).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ringflow/apps/device_choice.h"
#include "ringflow/apps/gradient_sync.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/tests/testing.h"

namespace ringflow::apps {
namespace {

constexpr comm::Timeout kTimeout = std::chrono::seconds(60);  // fail instead of hanging
constexpr int64_t kIn = 6, kHidden = 5, kClasses = 3;

// x (N, 6) -> (N, 3): two linear layers without bias around a tanh (smooth: no kinks).
class Tiny : public nn::Module {
 public:
  explicit Tiny(uint64_t seed) : Module("Tiny") {
    Generator gen(seed);
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(kIn, kHidden, false, &gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(kHidden, kClasses, false, &gen));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(tanh((*fc1)(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

constexpr int64_t kGradientBytes = 4 * (kIn * kHidden + kHidden * kClasses);

struct Batch {
  Tensor x, y;  // x (N, 6), y i64 (N)
};

Batch make_batch(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<double>((i * 5 + seed) % kClasses);
  return {randn({n, kIn}, &gen), from_vector(labels, {n}, DType::i64)};
}

Batch rows(const Batch& b, int64_t begin, int64_t count) {
  return {b.x.narrow(0, begin, count).contiguous(), b.y.narrow(0, begin, count).contiguous()};
}

using testing::max_rel_diff;

struct Strategy {
  std::string label;
  SyncOptions options;
  size_t collectives_per_step;  // allreduces of gradients (or buckets) per step
  int64_t payload = kGradientBytes;  // bytes of those collectives together
};

std::vector<Strategy> strategies() {
  std::vector<Strategy> s;
  auto with = [](SyncMode mode, comm::Algorithm algo, double cap_mb) {
    SyncOptions o;
    o.mode = mode;
    o.algorithm = algo;
    o.bucket_cap_mb = cap_mb;
    o.timeout = kTimeout;
    return o;
  };
  s.push_back({"gather-scatter", with(SyncMode::gather_scatter, comm::Algorithm::automatic, 25), 2});
  SyncOptions by_collectives = with(SyncMode::gather_scatter, comm::Algorithm::automatic, 25);
  by_collectives.gather_scatter_by_collectives = true;  // as over NCCL
  s.push_back({"gather-scatter by reduce and broadcast", by_collectives, 2});
  for (comm::Algorithm a : {comm::Algorithm::naive, comm::Algorithm::tree,
                            comm::Algorithm::recursive_doubling, comm::Algorithm::ring,
                            comm::Algorithm::native}) {
    s.push_back({std::string("allreduce ") + comm::algorithm_name(a), with(SyncMode::allreduce, a, 25), 2});
  }
  s.push_back({"ddp, a bucket per parameter", with(SyncMode::ddp, comm::Algorithm::automatic, 0), 2});
  // One bucket: fc2's 15 gradients, then fc1's 30 from the next 16-byte boundary.
  s.push_back({"ddp, one bucket", with(SyncMode::ddp, comm::Algorithm::automatic, 25), 1, 4 * (16 + kIn * kHidden)});
  return s;
}

}  // namespace

TEST_CASE("gradient sync: every strategy matches single-process training, ranks bitwise equal") {
  comm::MpiProcessGroupOptions po;
  po.checking = true;  // every collective's order and size checked across ranks
  auto pg = std::make_shared<comm::MpiProcessGroup>(MPI_COMM_WORLD, po);
  const int n = pg->size(), r = pg->rank();
  constexpr int64_t kGlobal = 12;  // divisible by 1, 2 and 3
  constexpr int kSteps = 5;
  const int64_t local = kGlobal / n;
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(make_batch(kGlobal, 1000 + s));
  const optim::SGDOptions sgd_options{.lr = 0.1, .momentum = 0.9};

  // The reference: one process, the whole batch, rank 0's initial model.
  auto ref = std::make_shared<Tiny>(100);
  optim::SGD ref_sgd(ref->parameters(), sgd_options);
  for (const Batch& b : batches) {
    cross_entropy((*ref)(b.x), b.y).backward();
    ref_sgd.step();
    ref_sgd.zero_grad();
  }

  std::vector<std::vector<Tensor>> results;  // each strategy's final parameters
  const std::vector<Strategy> all = strategies();
  for (const Strategy& st : all) {
    CAPTURE(st.label);
    auto model = std::make_shared<Tiny>(100 + r);  // differs per rank until the broadcast
    GradientSync sync(model, pg, st.options);
    optim::SGD sgd(model->parameters(), sgd_options);
    for (const Batch& global : batches) {
      // As apps/train's loop, one micro-batch per step.
      const Batch b = rows(global, r * local, local);
      cross_entropy(sync.forward(b.x, /*last=*/true), b.y).backward();
      sync.after_backward(/*last=*/true);
      const StepComm c = sync.take();
      sgd.step();
      sync.zero_grad(sgd);

      REQUIRE(c.events.size() == st.collectives_per_step);
      int64_t bytes = 0;
      for (const CommEvent& e : c.events) {
        bytes += e.bytes;
        CHECK(e.launched <= e.started);
        CHECK(e.started <= e.finished);
      }
      CHECK(bytes == st.payload);
      CHECK((n == 1 || c.traffic.sent > 0));
      // What the group counted (or modelled, for MPI's own) is the closed form.
      CHECK(c.traffic.sent == c.model.sent);
      CHECK(c.traffic.received == c.model.received);
      REQUIRE(c.waits.size() == 1);  // after backward, or at the end of ddp's backward
      CHECK(c.exposed_ms() >= 0);
    }
    CHECK(max_rel_diff(model->parameters(), ref->parameters()) <= 1e-5);
    results.push_back(model->parameters());
  }

  // Bitwise equal on every rank, per strategy: one allgather of every strategy's parameters.
  std::vector<float> mine;
  for (const auto& params : results)
    for (const Tensor& t : params)
      for (double v : t.to_vector<double>()) mine.push_back(static_cast<float>(v));  // f32 exact
  const int64_t count = static_cast<int64_t>(mine.size());
  Tensor gathered = zeros({count * n});
  comm::CollectiveOptions o;
  o.timeout = kTimeout;
  pg->allgather(gathered, from_vector(std::vector<double>(mine.begin(), mine.end()), {count}), o)
      ->wait();
  const float* all_ranks = gathered.data<float>();
  const size_t per_strategy = mine.size() / results.size();
  for (size_t s = 0; s < results.size(); ++s) {
    CAPTURE(all[s].label);
    for (int q = 1; q < n; ++q) {
      CAPTURE(q);
      CHECK(std::memcmp(all_ranks + s * per_strategy, all_ranks + q * count + s * per_strategy,
                        per_strategy * sizeof(float)) == 0);
    }
  }
}

// Federated averaging (--sync fedavg): a round after every step of plain SGD is an averaged
// gradient step, so it matches --sync allreduce; the bytes are the closed form's.
TEST_CASE("fedavg: --local-steps 1 with plain SGD equals allreduce; bytes as the closed form") {
  auto pg = std::make_shared<comm::MpiProcessGroup>(MPI_COMM_WORLD, comm::MpiProcessGroupOptions{});
  const int n = pg->size(), r = pg->rank();
  constexpr int64_t kGlobal = 12;
  constexpr int kSteps = 5;
  const int64_t local = kGlobal / n;
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(make_batch(kGlobal, 2000 + s));
  const optim::SGDOptions plain{.lr = 0.1, .momentum = 0, .weight_decay = 1e-4};
  auto train = [&](SyncOptions o) {
    o.timeout = kTimeout;
    auto model = std::make_shared<Tiny>(300 + r);
    GradientSync sync(model, pg, o);
    optim::SGD sgd(model->parameters(), plain);
    for (const Batch& global : batches) {
      const Batch b = rows(global, r * local, local);
      cross_entropy(sync.forward(b.x, true), b.y).backward();
      sync.after_backward(true);
      sgd.step();
      sync.zero_grad(sgd);
      const bool averaged = sync.after_step(local);
      const StepComm c = sync.take();
      if (o.mode == SyncMode::fedavg) {
        CHECK(averaged);
        CHECK(c.rounds == 1);
        // The round's payload and its one-element weight exchange, as the closed forms say.
        const comm::Algorithm algo = o.topology == comm::AverageTopology::cloud
                                         ? comm::Algorithm::naive : o.algorithm;
        const int64_t count = kGradientBytes / 4;
        comm::Traffic want = pg->allreduce_traffic_model(count, o.wire, algo);
        want += pg->allreduce_traffic_model(1, DType::f64, comm::Algorithm::automatic);
        CHECK(c.traffic.sent == want.sent);
        CHECK(c.traffic.received == want.received);
        CHECK(c.model.sent == want.sent);
      }
    }
    CHECK_FALSE(sync.end_of_epoch(1, true));  // nothing left to average after a round per step
    return model->parameters();
  };
  SyncOptions allreduce;
  allreduce.mode = SyncMode::allreduce;
  const std::vector<Tensor> want = train(allreduce);
  for (auto topology : {comm::AverageTopology::cloud, comm::AverageTopology::allreduce}) {
    CAPTURE(comm::average_topology_name(topology));
    SyncOptions o;
    o.mode = SyncMode::fedavg;
    o.local_steps = 1;
    o.topology = topology;
    o.algorithm = comm::Algorithm::ring;
    CHECK(max_rel_diff(train(o), want) <= 1e-6);
  }
}

TEST_CASE("fedavg: models weighted by samples; 16-bit on the wire within its rounding") {
  auto pg = std::make_shared<comm::MpiProcessGroup>(MPI_COMM_WORLD, comm::MpiProcessGroupOptions{});
  const int n = pg->size(), r = pg->rank();
  // Rank r holds r + 1 everywhere and trained on r + 1 samples: the weighted mean is
  // sum (r+1)^2 / sum (r+1) = (2n + 1) / 3.
  const double want = (2.0 * n + 1) / 3;
  for (DType wire : {DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(wire));
    Tiny model(1);
    {
      NoGradGuard no_grad;
      for (Tensor& p : model.parameters()) p.fill_(r + 1.0);
    }
    const CommEvent e = comm::average_model(model, *pg, r + 1.0,
                                            {.wire = wire, .timeout = kTimeout});
    CHECK(e.bytes == kGradientBytes / 4 * static_cast<int64_t>(dtype_size(wire)));
    const double eps = wire == DType::f32 ? 1e-6 : wire == DType::bf16 ? 2e-2 : 2e-3;
    for (const Tensor& p : model.parameters())
      for (double v : p.to_vector<double>()) CHECK(std::fabs(v - want) <= eps * want);
  }
  Tiny model(1);
  CHECK_THROWS_WITH_AS(comm::average_model(model, *pg, -1, {}), doctest::Contains("negative"),
                       std::invalid_argument);
}

// apps/train's --device and --backend for a machine with GPUs, which this one need not have:
// pure functions over a hand-made DeviceRequest. (Here because this program links apps/;
// tests/apps_test.cpp runs the binary, whose no-GPU answers it checks.)
TEST_CASE("device choice: each local rank its GPU, cuda:N literal, auto backend per GPU sharing") {
  using Kind = DeviceFlag::Kind;
  auto request = [](Kind kind, int index, int count, std::string why = "") {
    DeviceRequest r;
    r.flag = {kind, index};
    r.count = count;
    r.why = std::move(why);
    return r;
  };
  const DeviceRequest two_gpus = request(Kind::cuda, -1, 2);
  CHECK(choose_device(two_gpus, 0).device == Device::cuda(0));
  CHECK(choose_device(two_gpus, 1).device == Device::cuda(1));
  CHECK(choose_device(two_gpus, 3).device == Device::cuda(1));  // modulo the count
  CHECK(choose_device(two_gpus, 1).note == "cuda:1 (local rank 1 of a machine with 2 GPUs)");
  const DeviceRequest auto_one = request(Kind::automatic, -1, 1);
  CHECK(choose_device(auto_one, 2).device == Device::cuda(0));
  CHECK(choose_device(auto_one, 0).note == "cuda:0 (auto: local rank 0 of a machine with 1 GPU)");
  const DeviceRequest literal = request(Kind::cuda, 1, 2);
  CHECK(choose_device(literal, 0).device == Device::cuda(1));
  CHECK(choose_device(literal, 1).device == Device::cuda(1));
  const DeviceRequest none = request(Kind::automatic, -1, 0, "no driver");
  CHECK(choose_device(none, 1).device == Device::cpu());
  CHECK(choose_device(none, 1).note == "cpu (auto: no usable GPU: no driver)");
  CHECK(choose_device(request(Kind::cpu, -1, 2), 0).device == Device::cpu());

  // auto: NCCL when each local rank has a GPU of its own and no algorithm of ours is asked for.
  using B = BackendKind;
  using A = comm::Algorithm;
  CHECK(choose_backend(B::automatic, two_gpus, A::automatic, 2) == B::nccl);
  CHECK(choose_backend(B::automatic, two_gpus, A::native, 1) == B::nccl);
  CHECK(choose_backend(B::automatic, two_gpus, A::automatic, 3) == B::mpi);  // two ranks would share one
  CHECK(choose_backend(B::automatic, literal, A::automatic, 2) == B::mpi);   // both on cuda:1
  CHECK(choose_backend(B::automatic, literal, A::automatic, 1) == B::nccl);
  CHECK(choose_backend(B::automatic, two_gpus, A::ring, 2) == B::mpi);
  CHECK(choose_backend(B::automatic, none, A::automatic, 1) == B::mpi);
  CHECK(choose_backend(B::mpi, two_gpus, A::ring, 2) == B::mpi);
  CHECK(choose_backend(B::nccl, two_gpus, A::automatic, 3) == B::nccl);  // asked for: NCCL says why not
  CHECK_THROWS_WITH_AS(choose_backend(B::nccl, two_gpus, A::tree, 2),
                       "--backend nccl runs NCCL's own allreduce, not --algo tree (that one runs "
                       "over --backend mpi)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(choose_backend(B::nccl, none, A::automatic, 1),
                       "--backend nccl: NCCL reduces GPU tensors, but this rank trains on cpu "
                       "(--device auto: no usable GPU: no driver); use --backend mpi",
                       std::invalid_argument);
}

}  // namespace ringflow::apps
