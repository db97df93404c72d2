// NcclProcessGroup, and MpiProcessGroup on CUDA tensors, under mpiexec -n 1 and -n 2.
//
// Everywhere: the host-side logic (dtype, op and error mapping; local rank, device choice
// and shared-GPU detection; the string allgather of the bootstrap) and, where there is no
// CUDA device, that creating an NCCL group fails on every rank with the reason.
// With a device: an NCCL group of world size 1 on every rank (over MPI_COMM_SELF: the
// ranks may share a GPU) runs every collective on every dtype against closed forms; an NCCL
// group over all ranks runs where the host has a GPU per rank; the MPI group runs its
// algorithms and MPI's collectives on CUDA tensors (staged through pinned host memory).
// Rank r contributes (r+1) * k_i with k_i = 1 + i % 3, as in process_group_test.
//
// Skipped cases are skipped by doctest (counted as skipped), and a listener prints
// "SKIP: <case>: <reason>" for each. The decision is taken before main, from the CUDA
// device count and the launcher's count of ranks on this host (comm::mpi_launch), so that
// every rank skips the same cases.
#include <doctest/doctest.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/group/device_choice.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/nccl_detail.h"
#include "ringflow/comm/group/nccl_process_group.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/tests/skip_listener.h"

// Inside the namespace: comm::ReduceOp hides the kernels' ringflow::ReduceOp.
namespace ringflow::comm {
namespace {

struct CudaStatus {
  int count = 0;
  std::string why;
  int local_ranks = 1;  // ranks of this run on this host
};

const CudaStatus& cuda_status() {
  static const CudaStatus status = [] {
    CudaStatus s;
    s.count = cuda_device_count(&s.why);
    if (const std::optional<MpiLaunch> l = mpi_launch()) s.local_ranks = std::max(1, l->local_size);
    return s;
  }();
  return status;
}

// Evaluated during static initialisation, before the test cases below register.
const bool kNoDevice = cuda_status().count == 0;
const bool kNoGpuPerRank = cuda_status().count < cuda_status().local_ranks;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string skip_reason(const std::string& name) {
  const CudaStatus& s = cuda_status();
  if (starts_with(name, "[no device]")) {
    return cat("this machine has ", s.count, " CUDA device(s); the case checks the error "
               "without one");
  }
  if (s.count == 0) return s.why;
  return cat(s.local_ranks, " ranks on this host share ", s.count,
             " GPU(s); NCCL needs one GPU per rank");
}

struct NcclSkipWhy {
  std::string operator()(const std::string& name) const { return skip_reason(name); }
};

constexpr DType kDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                             DType::i64};

CollectiveOptions opts(ReduceOp op = ReduceOp::sum, int root = 0,
                       Algorithm algo = Algorithm::automatic) {
  CollectiveOptions o;
  o.op = op;
  o.root = root;
  o.algorithm = algo;
  o.timeout = std::chrono::seconds(60);  // a failure reports instead of hanging the test
  return o;
}

double k_of(int64_t i) { return static_cast<double>(1 + i % 3); }

// (count) elements on `device`, element i = scale * k_i.
Tensor pattern(int64_t count, DType dtype, double scale, Device device) {
  Tensor t = empty({count}, dtype);
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < count; ++i) p[i] = T(scale * k_of(i));
  });
  return t.to(device);
}

double expected_reduce(ReduceOp op, DType dtype, int n, double k) {
  const double s = n * (n + 1) / 2.0 * k;
  switch (op) {
    case ReduceOp::sum: return s;
    case ReduceOp::max: return n * k;
    case ReduceOp::min: return k;
    case ReduceOp::avg: return is_floating(dtype) ? s / n : std::trunc(s / n);
  }
  return 0;
}

// Element i == f(i) within `rel` (relative); reports the first mismatch with `what`.
template <class F>
void check_values(const Tensor& t, F f, const std::string& what, double rel = 1e-6) {
  const std::vector<double> v = t.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    const double want = f(static_cast<int64_t>(i));
    if (std::fabs(v[i] - want) > std::fabs(want) * rel) {
      FAIL_CHECK(what << ": element " << i << " is " << v[i] << ", expected " << want);
      return;
    }
  }
}

// NCCL reduces f16/bf16 in their own precision (and may pre-scale avg by 1/n).
double tolerance(DType d) {
  return d == DType::f16 ? 2e-3 : d == DType::bf16 ? 1.6e-2 : 1e-6;
}

std::string tag(const std::string& what, DType d, int64_t count) {
  return cat(what, " ", dtype_name(d), " count ", count);
}

// This rank's GPU when ranks may share one (the MPI group's staging).
Device my_gpu() {
  const std::optional<MpiLaunch> l = mpi_launch();
  return Device::cuda(device_for_local_rank(l ? std::max(0, l->local_rank) : 0, cuda_status().count));
}

// Every collective of `pg` on every dtype against closed forms, issued back to back and
// waited for together.
void check_every_collective(ProcessGroup& pg, Device device) {
  const int n = pg.size(), r = pg.rank();
  const int root = n - 1;  // not 0, so that a root ignored somewhere shows
  std::vector<std::pair<std::shared_ptr<Work>, std::function<void()>>> checks;
  for (DType d : kDtypes) {
    const double tol = tolerance(d);
    for (int64_t c : {int64_t{0}, int64_t{1}, int64_t{n + 1}, int64_t{13}, int64_t{100003}}) {
      const std::string where = cat(dtype_name(d), " count ", c);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
        Tensor t = pattern(c, d, r + 1, device);
        checks.emplace_back(pg.allreduce(t, opts(op)), [=] {
          check_values(t, [&](int64_t i) { return expected_reduce(op, d, n, k_of(i)); },
                       cat("allreduce ", reduce_op_name(op), " ", where), tol);
        });
      }
      Tensor b = pattern(c, d, r == root ? 7 : 1, device);
      checks.emplace_back(pg.broadcast(b, opts(ReduceOp::sum, root)), [=] {
        check_values(b, [](int64_t i) { return 7 * k_of(i); }, "broadcast " + where);
      });
      Tensor red = pattern(c, d, r + 1, device);
      checks.emplace_back(pg.reduce(red, opts(ReduceOp::sum, root)), [=] {
        check_values(red, [&](int64_t i) {
          return r == root ? expected_reduce(ReduceOp::sum, d, n, k_of(i)) : (r + 1) * k_of(i);
        }, "reduce " + where, tol);
      });
      Tensor in = pattern(c, d, r + 1, device);
      Tensor all = zeros({n * c}, d, device);
      checks.emplace_back(pg.allgather(all, in, opts()), [=] {
        check_values(all, [&](int64_t j) { return (j / c + 1) * k_of(j % c); },
                     "allgather " + where);
      });
      // reduce_scatter: input block q = (r+1) * (q+1) * k_i; rank r gets S * (r+1) * k_i.
      Tensor rs_in = empty({n * c}, d, device);
      for (int q = 0; q < n; ++q) {
        rs_in.narrow(0, q * c, c).copy_(pattern(c, d, (r + 1) * (q + 1), Device::cpu()));
      }
      Tensor rs_out = zeros({c}, d, device);
      checks.emplace_back(pg.reduce_scatter(rs_out, rs_in, opts()), [=] {
        check_values(rs_out, [&](int64_t i) { return n * (n + 1) / 2.0 * (r + 1) * k_of(i); },
                     "reduce_scatter " + where, tol);
      });
      Tensor g_in = pattern(c, d, r + 1, device);
      Tensor g_out = r == root ? zeros({n * c}, d, device) : Tensor();
      checks.emplace_back(pg.gather(g_out, g_in, opts(ReduceOp::sum, root)), [=] {
        if (r == root) {
          check_values(g_out, [&](int64_t j) { return (j / c + 1) * k_of(j % c); },
                       "gather " + where);
        }
      });
      Tensor s_in;
      if (r == root) {
        s_in = empty({n * c}, d, device);
        for (int q = 0; q < n; ++q) {
          s_in.narrow(0, q * c, c).copy_(pattern(c, d, q + 1, Device::cpu()));
        }
      }
      Tensor s_out = zeros({c}, d, device);
      checks.emplace_back(pg.scatter(s_out, s_in, opts(ReduceOp::sum, root)), [=] {
        check_values(s_out, [&](int64_t i) { return (r + 1) * k_of(i); }, "scatter " + where);
      });
    }
  }
  for (auto& [work, check] : checks) {
    work->wait();
    check();
  }
  pg.barrier(opts())->wait();
}

// Around a ring: even ranks send first, odd ranks receive first.
void check_send_recv(ProcessGroup& pg, Device device) {
  const int n = pg.size(), r = pg.rank();
  if (n == 1) return;
  for (DType d : kDtypes) {
    Tensor out = pattern(n + 1, d, r + 1, device);
    Tensor in = zeros({n + 1}, d, device);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::shared_ptr<Work> a, b;
    if (r % 2 == 0) {
      a = pg.send(out, next, /*tag=*/3, opts());
      b = pg.recv(in, prev, /*tag=*/3, opts());
    } else {
      b = pg.recv(in, prev, /*tag=*/3, opts());
      a = pg.send(out, next, /*tag=*/3, opts());
    }
    a->wait();
    b->wait();
    check_values(in, [&](int64_t i) { return (prev + 1) * k_of(i); },
                 cat("recv ", dtype_name(d)));
  }
}

}  // namespace

DOCTEST_REGISTER_LISTENER("nccl_skip_reason", 1, SkipReasonListener<NcclSkipWhy>);

// ---------------------------------------------------------------- host side, everywhere

TEST_CASE("NCCL types and ops: one for every dtype and reduce op") {
  CHECK(detail::nccl_dtype(DType::f32) == ncclFloat32);
  CHECK(detail::nccl_dtype(DType::f64) == ncclFloat64);
  CHECK(detail::nccl_dtype(DType::f16) == ncclFloat16);
  CHECK(detail::nccl_dtype(DType::bf16) == ncclBfloat16);
  CHECK(detail::nccl_dtype(DType::i32) == ncclInt32);
  CHECK(detail::nccl_dtype(DType::i64) == ncclInt64);
  CHECK(detail::nccl_op(ReduceOp::sum) == ncclSum);
  CHECK(detail::nccl_op(ReduceOp::avg) == ncclAvg);
  CHECK(detail::nccl_op(ReduceOp::max) == ncclMax);
  CHECK(detail::nccl_op(ReduceOp::min) == ncclMin);
}

TEST_CASE("NCCL errors become messages that name the call, NCCL's words and what to do") {
  CHECK(std::string(detail::nccl_error_hint(ncclSuccess)).empty());
  for (ncclResult_t code : {ncclUnhandledCudaError, ncclSystemError, ncclInternalError,
                            ncclInvalidArgument, ncclInvalidUsage, ncclRemoteError}) {
    CAPTURE(static_cast<int>(code));
    const std::string msg = detail::nccl_error_message("ncclAllReduce", code, nullptr);
    CHECK(msg.find("ncclAllReduce failed: ") == 0);
    CHECK(msg.find(ncclGetErrorString(code)) != std::string::npos);
    CHECK(msg.find(cat("(NCCL error ", static_cast<int>(code), ")")) != std::string::npos);
    CHECK(std::string(detail::nccl_error_hint(code)).size() > 20);
    CHECK(msg.find(detail::nccl_error_hint(code)) != std::string::npos);
    CHECK(msg.find("NCCL says") == std::string::npos);
  }
  const std::string dup = detail::nccl_error_message(
      "ncclCommInitRankConfig", ncclInvalidUsage, "Duplicate GPU detected : rank 1 and rank 0");
  CHECK(dup.find("NCCL says: Duplicate GPU detected") != std::string::npos);
  CHECK(dup.find("give every rank its own GPU") != std::string::npos);
  CHECK(dup.find("MpiProcessGroup") != std::string::npos);
  CHECK(detail::nccl_error_message("x", ncclSystemError, "").find("NCCL says") ==
        std::string::npos);
}

TEST_CASE("device choice: local rank modulo the device count; shared GPUs are named") {
  const std::vector<std::string> hosts = {"a", "b", "a", "a", "b"};
  CHECK(local_rank_among(hosts, 0) == 0);
  CHECK(local_rank_among(hosts, 1) == 0);
  CHECK(local_rank_among(hosts, 2) == 1);
  CHECK(local_rank_among(hosts, 3) == 2);
  CHECK(local_rank_among(hosts, 4) == 1);
  CHECK(local_size_among(hosts, 3) == 3);
  CHECK(local_size_among(hosts, 4) == 2);
  CHECK_THROWS_AS(local_rank_among(hosts, 5), std::invalid_argument);

  CHECK(device_for_local_rank(0, 1) == 0);
  CHECK(device_for_local_rank(1, 1) == 0);  // two ranks, one GPU: NCCL refuses this
  CHECK(device_for_local_rank(3, 2) == 1);
  CHECK(device_for_local_rank(5, 8) == 5);
  CHECK_THROWS_WITH_AS(device_for_local_rank(0, 0), doctest::Contains("no CUDA device"),
                       std::invalid_argument);
  CHECK_THROWS_AS(device_for_local_rank(-1, 2), std::invalid_argument);

  CHECK(shared_devices({"a/0000:01:00.0", "a/0000:02:00.0", "b/0000:01:00.0"}).empty());
  CHECK(shared_devices({"a/0000:01:00.0", "b/0000:01:00.0", "a/0000:01:00.0"}) ==
        "ranks 0 and 2 both use a/0000:01:00.0");
  CHECK(shared_devices({"", ""}).empty());  // ranks without a GPU share nothing
  CHECK(shared_devices({}).empty());
  CHECK_FALSE(host_name().empty());
}

TEST_CASE("allgather_strings: every rank's string in rank order, any lengths") {
  MpiProcessGroup pg(MPI_COMM_WORLD);
  const int n = pg.size(), r = pg.rank();
  // Lengths 0, 9, 18, ...: empty, shorter and longer than a word, not multiples of 8.
  const auto text = [](int q) { return std::string(static_cast<size_t>(9 * q), char('a' + q)); };
  const std::vector<std::string> all = allgather_strings(pg, text(r), std::chrono::seconds(60));
  REQUIRE(all.size() == static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) CHECK(all[q] == text(q));
  const std::vector<std::string> hosts = allgather_strings(pg, host_name(), std::chrono::seconds(60));
  CHECK(hosts[r] == host_name());
}

TEST_CASE("[no device] creating an NCCL group fails on every rank, naming the reason" *
          doctest::skip(!kNoDevice)) {
  try {
    NcclProcessGroup pg(MPI_COMM_WORLD);
    FAIL("an NCCL group was created without a CUDA device");
  } catch (const CommError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("NcclProcessGroup on rank") == 0);
    CHECK(msg.find("rank 0 (host ") != std::string::npos);  // every rank names rank 0
    CHECK(msg.find("no CUDA device") != std::string::npos);
    CHECK(msg.find(cuda_status().why) != std::string::npos);
  }
  // Through an existing MPI group, which stays usable.
  MpiProcessGroup boot(MPI_COMM_WORLD);
  CHECK_THROWS_WITH_AS(NcclProcessGroup{boot}, doctest::Contains("no CUDA device"), CommError);
  Tensor t = full({3}, boot.rank() + 1.0);
  boot.allreduce(t, opts())->wait();
  CHECK(t.to_vector<double>()[2] == boot.size() * (boot.size() + 1) / 2.0);
  NcclProcessGroupOptions bad;
  bad.device = -2;
  CHECK_THROWS_WITH_AS(NcclProcessGroup(boot, bad), doctest::Contains("device must be"),
                       std::invalid_argument);
}

// ---------------------------------------------------------------- with a device

TEST_CASE("[device] NCCL group of world size 1: every collective on every dtype" *
          doctest::skip(kNoDevice)) {
  NcclProcessGroup pg(MPI_COMM_SELF);  // one group per rank: the ranks may share a GPU
  REQUIRE(pg.size() == 1);
  CHECK(pg.rank() == 0);
  CHECK(pg.backend_name() == "nccl");
  CHECK(pg.broken_reason().empty());
  const Device gpu = Device::cuda(pg.device());
  SUBCASE("every collective on every dtype against closed forms") {
    check_every_collective(pg, gpu);
  }
  SUBCASE("Works: sequence numbers, completion, is_success without wait") {
    Tensor t = full({1000}, 2.0, DType::f32, gpu);
    auto w = pg.allreduce(t, opts());
    CHECK(w->description().find("allreduce #") == 0);
    CHECK(w->description().find("(f32, 1000 elements, sum, native)") != std::string::npos);
    while (!w->is_completed()) {
    }
    CHECK(w->is_success());
    CHECK(w->exception() == nullptr);
    w->wait(std::chrono::milliseconds(1));  // completed: returns at once
  }
  SUBCASE("the collective runs after the kernels queued before it") {
    // fill_ runs on the legacy default stream; the allreduce on the group's stream must
    // wait for it (Note [NCCL streams]).
    Tensor t = empty({1 << 22}, DType::f32, gpu);
    for (int k = 1; k <= 4; ++k) {
      t.fill_(k);
      pg.allreduce(t, opts())->wait();
      const std::vector<float> v = t.to_vector<float>();
      CHECK(v.front() == float(k));
      CHECK(v.back() == float(k));
    }
  }
  SUBCASE("argument errors throw at the call") {
    CHECK_THROWS_WITH_AS(pg.allreduce(zeros({4})), doctest::Contains("runs on cuda:"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(pg.allreduce(zeros({4}, DType::f32, gpu),
                                      opts(ReduceOp::sum, 0, Algorithm::ring)),
                         doctest::Contains("MpiProcessGroup"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(pg.allgather(zeros({2}), zeros({2}, DType::f32, gpu)),
                         doctest::Contains("runs on cuda:"), std::invalid_argument);
    CHECK_THROWS_AS(pg.send(zeros({1}, DType::f32, gpu), 0), std::invalid_argument);
  }
  SUBCASE("a Work outlives its group") {
    std::shared_ptr<Work> w;
    Tensor t = full({4096}, 3.0, DType::f64, gpu);
    {
      NcclProcessGroup short_lived(MPI_COMM_SELF);
      w = short_lived.allreduce(t, opts(ReduceOp::max));
    }
    w->wait();
    CHECK(t.to_vector<double>()[4095] == 3.0);
  }
}

TEST_CASE("[one GPU per rank] NCCL group over every rank: every collective, send/recv" *
          doctest::skip(kNoDevice || kNoGpuPerRank)) {
  NcclProcessGroup pg(MPI_COMM_WORLD);
  const Device gpu = Device::cuda(pg.device());
  check_every_collective(pg, gpu);
  check_send_recv(pg, gpu);
  CHECK(pg.broken_reason().empty());
}

TEST_CASE("[device] MPI group on CUDA tensors: our algorithms and MPI's collectives" *
          doctest::skip(kNoDevice)) {
  MpiProcessGroup pg(MPI_COMM_WORLD);
  const int n = pg.size(), r = pg.rank();
  const Device gpu = my_gpu();  // the ranks may share it: everything goes over MPI
  set_cuda_device(gpu.index);   // where its tensors are allocated
  const Algorithm algos[] = {Algorithm::naive, Algorithm::tree, Algorithm::recursive_doubling,
                             Algorithm::ring, Algorithm::native, Algorithm::automatic};
  struct Case { Tensor t; DType d; int64_t count; Algorithm a; ReduceOp op; std::shared_ptr<Work> w; };
  std::vector<Case> cases;
  for (Algorithm a : algos) {
    for (DType d : kDtypes) {
      for (int64_t c : {int64_t{0}, int64_t{1}, int64_t{n + 1}, int64_t{13}, int64_t{300007}}) {
        cases.push_back({pattern(c, d, r + 1, gpu), d, c, a, ReduceOp::sum, {}});
      }
      cases.push_back({pattern(n + 1, d, r + 1, gpu), d, n + 1, a, ReduceOp::avg, {}});
      cases.push_back({pattern(n + 1, d, r + 1, gpu), d, n + 1, a, ReduceOp::max, {}});
    }
  }
  for (Case& c : cases) c.w = pg.allreduce(c.t, opts(c.op, 0, c.a));
  for (Case& c : cases) {
    c.w->wait();
    CHECK(c.t.device() == gpu);
    check_values(c.t, [&](int64_t i) { return expected_reduce(c.op, c.d, n, k_of(i)); },
                 tag(cat(algorithm_name(c.a), " ", reduce_op_name(c.op)), c.d, c.count),
                 c.d == DType::bf16 ? 1e-2 : 1e-3);
  }
  // Every other collective, staged in and out as it reads and writes.
  check_every_collective(pg, gpu);
  check_send_recv(pg, gpu);
  // A CPU input with a CUDA output is refused at the call.
  CHECK_THROWS_WITH_AS(pg.allgather(zeros({n * 2}, DType::f32, gpu), zeros({2})),
                       doctest::Contains("different devices"), std::invalid_argument);
}

}  // namespace ringflow::comm
