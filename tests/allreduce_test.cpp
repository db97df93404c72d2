// The allreduce algorithms of comm/ (naive, tree, recursive doubling, ring) on each
// transport (MpiTransport; ShmTransport, since mpiexec runs every rank on this node;
// TcpTransport, through this node's own address; and ShmTransport with tiny slots, so
// that every message takes many pieces and wraps its channel), run under mpiexec at 1..5 ranks: against closed forms (rank r contributes
// (r + 1) * k with k = 1 + i % 7, so sum = k n(n+1)/2, max = k n, min = k, avg = sum / n,
// all exact in every dtype) and against MPI_Allreduce on random data. Every rank runs
// every case. At 3+ ranks (oversubscribed on small machines, where a collective is slow:
// docs/allreduce.md) the sweep is thinned: each (algorithm, dtype, count) takes one op in turn.
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/base/scratch.h"
#include "ringflow/comm/bootstrap/mpi_bootstrap.h"
#include "ringflow/comm/transport/counting_transport.h"
#include "ringflow/comm/transport/mpi_transport.h"
#include "ringflow/comm/transport/shm_transport.h"
#include "ringflow/comm/transport/tcp_transport.h"

using namespace ringflow;
using namespace ringflow::comm;

namespace {

constexpr Algorithm kAlgorithms[] = {Algorithm::naive, Algorithm::tree,
                                     Algorithm::recursive_doubling, Algorithm::ring};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16,
                             DType::bf16, DType::i32, DType::i64};

MPI_Comm dup_world() {
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  return c;
}

// The transports, made once for the whole test program (ShmTransport::create is collective).
struct Transports {
  MpiTransport mpi{dup_world()};
  MpiBootstrap bootstrap{dup_world()};
  std::unique_ptr<ShmTransport> shm = ShmTransport::create(bootstrap);
  // 64-byte slots, 2 per channel: a 1 KB message takes 16 pieces and wraps its channel 8 times.
  std::unique_ptr<ShmTransport> shm_tiny =
      ShmTransport::create(bootstrap, {.slot_bytes = 64, .slots = 2});
  // On one node it connects through the first interface that is up (loopback at worst).
  std::unique_ptr<TcpTransport> tcp = TcpTransport::create(bootstrap);
};

Transports& transports() {
  static Transports t;
  return t;
}

Transport* current = nullptr;

// The transport the algorithms run on: MPI's unless inside on_each_transport.
Transport& transport() { return current ? *current : transports().mpi; }

// Runs f once per transport (tiny: also on the tiny-slot one), with transport() set to it.
template <class F>
void on_each_transport(F f, bool tiny = false) {
  Transports& t = transports();
  REQUIRE_MESSAGE(t.shm, "every rank of mpiexec is on this node: ShmTransport must be made");
  REQUIRE(t.shm_tiny);
  REQUIRE(t.tcp);
  std::vector<std::pair<const char*, Transport*>> list = {
      {"mpi", &t.mpi}, {"shm", t.shm.get()}, {"tcp", t.tcp.get()}};
  if (tiny) list.push_back({"shm with 64-byte slots", t.shm_tiny.get()});
  for (auto [name, transport] : list) {
    CAPTURE(name);
    current = transport;
    f();
  }
  current = nullptr;
}

void run(Algorithm algo, Buffer buf, ReduceOp op, size_t segment_bytes = 1 << 20) {
  Transport& t = transport();
  switch (algo) {
    case Algorithm::naive: return naive_allreduce(t, buf, op, /*root=*/t.size() - 1);
    case Algorithm::tree: return tree_allreduce(t, buf, op);
    case Algorithm::recursive_doubling: return recursive_doubling_allreduce(t, buf, op);
    case Algorithm::ring: return ring_allreduce(t, buf, op, segment_bytes);
    default: FAIL("not an algorithm of ours"); return;
  }
}

double get(const std::vector<unsigned char>& bytes, DType dtype, int64_t i) {
  return visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return static_cast<double>(static_cast<float>(v));
    } else {
      return static_cast<double>(v);
    }
  });
}

void set(std::vector<unsigned char>& bytes, DType dtype, int64_t i, double value) {
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T v;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      v = T(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
  });
}

// The closed form at element i of n ranks.
double expected(ReduceOp op, DType dtype, int n, int64_t i) {
  const double k = 1 + static_cast<double>(i % 7);
  const double sum = k * n * (n + 1) / 2;
  switch (op) {
    case ReduceOp::sum: return sum;
    case ReduceOp::max: return k * n;
    case ReduceOp::min: return k;
    case ReduceOp::avg:
      if (dtype == DType::i32 || dtype == DType::i64) return std::trunc(sum / n);
      return sum / n;
  }
  return 0;
}

void check_closed_form(Algorithm algo, DType dtype, ReduceOp op, int64_t count,
                       size_t segment_bytes = 1 << 20) {
  const int rank = transport().rank(), n = transport().size();
  CAPTURE(algorithm_name(algo));
  CAPTURE(dtype_name(dtype));
  CAPTURE(reduce_op_name(op));
  CAPTURE(count);
  CAPTURE(segment_bytes);
  std::vector<unsigned char> bytes(count * dtype_size(dtype) + 1);
  for (int64_t i = 0; i < count; ++i) set(bytes, dtype, i, (rank + 1) * (1 + i % 7));
  run(algo, {count ? bytes.data() : nullptr, count, dtype}, op, segment_bytes);
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < count; ++i) {
    if (get(bytes, dtype, i) != expected(op, dtype, n, i)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  if (bad) {
    FAIL_CHECK(bad, " wrong elements; first at ", first_bad, ": got ",
               get(bytes, dtype, first_bad), ", expected ",
               expected(op, dtype, n, first_bad));
  }
}

// FNV-1a of the bytes, to check that every rank ends with the same bits.
uint64_t fingerprint(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  return h;
}

void check_same_everywhere(const void* data, size_t bytes) {
  const uint64_t h = fingerprint(data, bytes);
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK_MESSAGE(lo == hi, "ranks hold different results");
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    default: return MPI_SUM;
  }
}

// Random data (seeded by rank) against MPI_Allreduce on the same data. For f16/bf16,
// MPI reduces the f32 values of the same 16-bit inputs and the tolerance allows one
// rounding to 16 bits per addition.
void check_against_mpi(Algorithm algo, DType dtype, ReduceOp op, int64_t count) {
  const int rank = transport().rank(), n = transport().size();
  CAPTURE(algorithm_name(algo));
  CAPTURE(dtype_name(dtype));
  CAPTURE(reduce_op_name(op));
  CAPTURE(count);
  std::mt19937_64 rng(1234 + 77 * rank);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> integer(-1000, 1000);
  const bool narrow = dtype == DType::f16 || dtype == DType::bf16;
  std::vector<unsigned char> ours(count * dtype_size(dtype) + 1);
  for (int64_t i = 0; i < count; ++i) {
    set(ours, dtype, i, is_floating(dtype) ? real(rng) : integer(rng));
  }
  // The reference input: the same values, in a type MPI knows.
  const DType ref_dtype = narrow ? DType::f32 : dtype;
  std::vector<unsigned char> ref(count * dtype_size(ref_dtype) + 1);
  for (int64_t i = 0; i < count; ++i) set(ref, ref_dtype, i, get(ours, dtype, i));
  MPI_Allreduce(MPI_IN_PLACE, ref.data(), static_cast<int>(count), mpi_type(ref_dtype),
                mpi_op(op), MPI_COMM_WORLD);

  run(algo, {ours.data(), count, dtype}, op);

  const double tol = dtype == DType::f64   ? 1e-12 * n
                     : dtype == DType::f32 ? 1e-5 * n
                     : dtype == DType::f16 ? 2e-3 * n * n
                     : dtype == DType::bf16 ? 1.6e-2 * n * n
                                            : 0.0;
  int64_t bad = 0, first_bad = -1;
  double got_bad = 0, want_bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    double want = get(ref, ref_dtype, i);
    if (op == ReduceOp::avg) want = is_floating(dtype) ? want / n : std::trunc(want / n);
    const double got = get(ours, dtype, i);
    if (!(std::fabs(got - want) <= tol)) {
      if (bad++ == 0) first_bad = i, got_bad = got, want_bad = want;
    }
  }
  if (bad) {
    FAIL_CHECK(bad, " elements off by more than ", tol, "; first at ", first_bad, ": got ",
               got_bad, ", MPI_Allreduce gives ", want_bad);
  }
  check_same_everywhere(ours.data(), count * dtype_size(dtype));
}

// A receive from rank 1, which never sends, throws within the transport's deadline, naming
// rank 1 (the caller set a deadline of 200 ms; 20 s is a hang).
void check_recv_times_out(Transport& t, void* buffer, size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  try {
    t.recv(buffer, bytes, /*peer=*/1);
    FAIL("recv returned without a sender");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("timed out") != std::string::npos, what);
    CHECK_MESSAGE(what.find("rank 1") != std::string::npos, what);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

}  // namespace

TEST_CASE("names round-trip and unknown names list the choices") {
  for (ReduceOp op : kOps) CHECK(reduce_op_from_name(reduce_op_name(op)) == op);
  for (Algorithm a : {Algorithm::automatic, Algorithm::native, Algorithm::naive,
                      Algorithm::tree, Algorithm::recursive_doubling, Algorithm::ring}) {
    CHECK(algorithm_from_name(algorithm_name(a)) == a);
  }
  try {
    algorithm_from_name("butterfly");
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("butterfly") != std::string::npos);
    CHECK(what.find("ring") != std::string::npos);
    CHECK(what.find("recursive_doubling") != std::string::npos);
  }
  CHECK_THROWS_AS(reduce_op_from_name("prod"), std::invalid_argument);
}

TEST_CASE("choose_allreduce: recursive doubling for small messages, ring for large") {
  CHECK(choose_allreduce(4, 2) == Algorithm::recursive_doubling);
  CHECK(choose_allreduce(4096, 4) == Algorithm::recursive_doubling);
  CHECK(choose_allreduce(1 << 20, 2) == Algorithm::ring);
  CHECK(choose_allreduce(64 << 20, 5) == Algorithm::ring);
}

TEST_CASE("reduce_into and finish_average on every dtype") {
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(reduce_op_name(op));
      const int64_t count = 37;  // not a multiple of any vector width
      std::vector<unsigned char> a(count * dtype_size(dtype)), b(a.size());
      for (int64_t i = 0; i < count; ++i) {
        set(a, dtype, i, static_cast<double>(i % 5));
        set(b, dtype, i, static_cast<double>(4 - i % 5) * 2);
      }
      reduce_into(a.data(), b.data(), count, dtype, op);
      if (op == ReduceOp::avg) finish_average({a.data(), count, dtype}, 2);
      for (int64_t i = 0; i < count; ++i) {
        const double x = static_cast<double>(i % 5), y = static_cast<double>(4 - i % 5) * 2;
        double want = op == ReduceOp::max ? std::max(x, y)
                      : op == ReduceOp::min ? std::min(x, y)
                                            : x + y;
        if (op == ReduceOp::avg) want = is_floating(dtype) ? want / 2 : std::trunc(want / 2);
        CHECK(get(a, dtype, i) == want);
      }
    }
  }
  CHECK_THROWS_AS(reduce_into(nullptr, nullptr, -1, DType::f32, ReduceOp::sum),
                  std::invalid_argument);
}

TEST_CASE("every algorithm x dtype x op x small count gives the closed form") {
  on_each_transport([&] {
    const int n = transport().size();
    const bool full = n <= 2;
    int turn = 0;
    for (Algorithm algo : kAlgorithms) {
      for (DType dtype : kDTypes) {
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t(n - 1), int64_t(n + 1), int64_t{37}}) {
          if (full) {
            for (ReduceOp op : kOps) check_closed_form(algo, dtype, op, count);
          } else {
            if (count == 37 && n >= 4) continue;
            check_closed_form(algo, dtype, kOps[turn++ % 4], count);
          }
        }
      }
    }
  }, /*tiny=*/true);
}

// Hosts of the world's ranks to try: one host, a host per rank, and blocks of 2 and 3 ranks
// (2x2 at 4 ranks, 3x2 and 2x3 at 6), one layout whose hosts interleave.
std::vector<std::vector<int>> host_layouts(int n) {
  std::vector<std::vector<int>> layouts{std::vector<int>(n, 0), {}};
  for (int r = 0; r < n; ++r) layouts[1].push_back(r);
  for (int per_host : {2, 3}) {
    if (n <= per_host) continue;
    std::vector<int> blocks;
    for (int r = 0; r < n; ++r) blocks.push_back(r / per_host);
    layouts.push_back(blocks);
  }
  if (n >= 3) {
    std::vector<int> interleaved;
    for (int r = 0; r < n; ++r) interleaved.push_back(r % 2);
    layouts.push_back(interleaved);
  }
  return layouts;
}

TEST_CASE("hierarchical allreduce: every layout of hosts gives the closed form, the same bits everywhere") {
  on_each_transport([] {
    const int rank = transport().rank(), n = transport().size();
    for (const std::vector<int>& hosts : host_layouts(n)) {
      std::string layout;
      for (int h : hosts) layout += std::to_string(h);
      CAPTURE(layout);
      for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
          for (int64_t count : {int64_t{1}, int64_t{n + 1}, int64_t{1009}}) {
            CAPTURE(dtype_name(dtype));
            CAPTURE(reduce_op_name(op));
            CAPTURE(count);
            std::vector<unsigned char> bytes(count * dtype_size(dtype));
            for (int64_t i = 0; i < count; ++i) set(bytes, dtype, i, (rank + 1) * (1 + i % 7));
            CountingTransport counted(transport());
            hierarchical_allreduce(counted, {bytes.data(), count, dtype}, op, hosts);
            const Traffic want = hierarchical_traffic(count, dtype_size(dtype), hosts, rank);
            CHECK(counted.traffic().sent == want.sent);
            CHECK(counted.traffic().received == want.received);
            int64_t bad = 0;
            for (int64_t i = 0; i < count; ++i) bad += get(bytes, dtype, i) != expected(op, dtype, n, i);
            CHECK_MESSAGE(bad == 0, bad, " wrong elements");
            check_same_everywhere(bytes.data(), bytes.size());
          }
        }
      }
    }
  });
}

TEST_CASE("a large prime count (1000003 elements), several ring segments") {
  on_each_transport([&] {
    const int n = transport().size();
    for (Algorithm algo : kAlgorithms) check_closed_form(algo, DType::f32, ReduceOp::sum, 1000003);
    check_closed_form(Algorithm::ring, DType::bf16, ReduceOp::avg, 1000003);
    if (n <= 3) {
      check_closed_form(Algorithm::ring, DType::f64, ReduceOp::max, 1000003);
      check_closed_form(Algorithm::recursive_doubling, DType::i64, ReduceOp::avg, 1000003);
    }
  });
}

TEST_CASE("ring over a buffer larger than the cache keeps: the last step streams") {
  on_each_transport([&] {
    const int64_t count = static_cast<int64_t>(detail::streaming_from_bytes() / 4) + 3;
    check_closed_form(Algorithm::ring, DType::f32, ReduceOp::sum, count);
    if (transport().size() <= 3) {
      check_closed_form(Algorithm::ring, DType::bf16, ReduceOp::avg, 2 * count + 1);
    }
  });
}

TEST_CASE("ring with tiny segments and uneven chunks") {
  on_each_transport([&] {
    const int n = transport().size();
    // Segments smaller than an element, of odd sizes, and more segments than elements.
    for (size_t segment_bytes : {size_t{1}, size_t{12}, size_t{100}}) {
      const int64_t count = n <= 2 ? 1009 : 6 * n + 1;  // one sendrecv per segment
      check_closed_form(Algorithm::ring, DType::f32, ReduceOp::sum, count, segment_bytes);
      if (n <= 3) {
        check_closed_form(Algorithm::ring, DType::f16, ReduceOp::max, n + 1, segment_bytes);
        check_closed_form(Algorithm::ring, DType::i64, ReduceOp::avg, 2 * n + 3, segment_bytes);
      }
    }
  }, /*tiny=*/true);
}

TEST_CASE("random data agrees with MPI_Allreduce, and every rank holds the same bits") {
  on_each_transport([&] {
    const int n = transport().size();
    for (Algorithm algo : kAlgorithms) {
      if (n <= 3) {
        for (DType dtype : kDTypes) {
          for (ReduceOp op : kOps) check_against_mpi(algo, dtype, op, 1001);
        }
      } else {
        check_against_mpi(algo, DType::f32, ReduceOp::sum, 1001);
        check_against_mpi(algo, DType::bf16, ReduceOp::avg, 1001);
        check_against_mpi(algo, DType::i64, ReduceOp::max, 1001);
      }
      check_against_mpi(algo, DType::f32, ReduceOp::sum, 262147);  // prime, > 1 MB
    }
  });
}

TEST_CASE("bad arguments throw before any message is sent") {
  float x = 0;
  CHECK_THROWS_AS(ring_allreduce(transport(), {&x, -1, DType::f32}, ReduceOp::sum),
                  std::invalid_argument);
  CHECK_THROWS_AS(tree_allreduce(transport(), {nullptr, 3, DType::f32}, ReduceOp::sum),
                  std::invalid_argument);
  CHECK_THROWS_AS(naive_allreduce(transport(), {&x, 1, DType::f32}, ReduceOp::sum, /*root=*/99),
                  std::invalid_argument);
  CHECK_THROWS_AS(ring_allreduce(transport(), {&x, 1, DType::f32}, ReduceOp::sum, 0),
                  std::invalid_argument);
}

TEST_CASE("MpiTransport with a deadline: the polling path gives the same results") {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  {
    MpiTransport t(comm, MpiTransport::kDefaultTag,
                   std::chrono::steady_clock::now() + std::chrono::seconds(120));
    const int rank = t.rank(), n = t.size();
    for (int64_t count : {int64_t{1}, int64_t(n + 1), int64_t{4099}}) {
      CAPTURE(count);
      std::vector<float> ring(count), tree(count), rd(count), naive(count);
      for (int64_t i = 0; i < count; ++i) ring[i] = tree[i] = rd[i] = naive[i] = (rank + 1) * (1 + i % 7);
      ring_allreduce(t, {ring.data(), count, DType::f32}, ReduceOp::sum, /*segment_bytes=*/1000);
      tree_allreduce(t, {tree.data(), count, DType::f32}, ReduceOp::max);
      recursive_doubling_allreduce(t, {rd.data(), count, DType::f32}, ReduceOp::min);
      naive_allreduce(t, {naive.data(), count, DType::f32}, ReduceOp::avg);
      int64_t bad = 0;
      for (int64_t i = 0; i < count; ++i) {
        bad += ring[i] != expected(ReduceOp::sum, DType::f32, n, i);
        bad += tree[i] != expected(ReduceOp::max, DType::f32, n, i);
        bad += rd[i] != expected(ReduceOp::min, DType::f32, n, i);
        bad += naive[i] != expected(ReduceOp::avg, DType::f32, n, i);
      }
      CHECK(bad == 0);
    }
  }
  MPI_Comm_free(&comm);
}

TEST_CASE("MpiTransport past its deadline throws naming the peer that did not send") {
  const int n = transport().size();
  if (n < 2) return;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  // The abandoned receive stays posted (MPI cannot take it back): it needs a buffer that
  // outlives it, and rank 1 sends it a message afterwards so that it completes.
  static char abandoned[16];
  if (transport().rank() == 0) {
    MpiTransport t(comm, MpiTransport::kDefaultTag,
                   std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    check_recv_times_out(t, abandoned, sizeof abandoned);
  }
  MPI_Barrier(comm);
  if (transport().rank() == 1) {
    char late[16] = {};
    MPI_Send(late, sizeof late, MPI_BYTE, 0, MpiTransport::kDefaultTag, comm);
  }
  MPI_Barrier(comm);
  MPI_Comm_free(&comm);
}

// ShmTransport and TcpTransport: the same contract (a deadline, a broken state, lengths
// checked), so the same cases. fresh<T>() makes one of its own (collective).
template <class T>
std::unique_ptr<T> fresh() {
  MPI_Comm comm = dup_world();
  std::unique_ptr<T> t;
  {
    MpiBootstrap bootstrap(comm);
    t = T::create(bootstrap);
  }
  MPI_Comm_free(&comm);  // neither transport keeps it
  return t;
}

// The shared one to run messages through: for ShmTransport the tiny-slot one (a channel
// holds 2 x 64 bytes), so that every message wraps its channel.
template <class T>
T& shared_transport() {
  if constexpr (std::is_same_v<T, ShmTransport>) {
    return *transports().shm_tiny;
  } else {
    return *transports().tcp;
  }
}

TEST_CASE_TEMPLATE("sendrecv with itself and with a neighbour, messages longer than a buffer", T,
                   ShmTransport, TcpTransport) {
  T& t = shared_transport<T>();
  const int rank = t.rank(), n = t.size();
  std::vector<size_t> sizes = {0, 1, 63, 64, 1000, 4099};
  // Over TCP also messages longer than a connection's socket buffers (at most 4 MB out and
  // 6 MB in by Linux's defaults), so that both ends must send and receive at once.
  if constexpr (std::is_same_v<T, TcpTransport>) sizes.push_back(size_t{32} << 20);
  for (size_t bytes : sizes) {
    CAPTURE(bytes);
    std::vector<unsigned char> out(bytes + 1), in(bytes + 1, 0xee);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(rank * 31 + i);
    t.sendrecv(out.data(), bytes, rank, in.data(), bytes, rank);
    CHECK(std::memcmp(in.data(), out.data(), bytes) == 0);
    CHECK(in[bytes] == 0xee);  // nothing written past the message
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    t.sendrecv(out.data(), bytes, right, in.data(), bytes, left);
    int64_t bad = 0;
    for (size_t i = 0; i < bytes; ++i) bad += in[i] != static_cast<unsigned char>(left * 31 + i);
    CHECK(bad == 0);
    CHECK(in[bytes] == 0xee);
  }
}

TEST_CASE_TEMPLATE("with a deadline, the same results", T, ShmTransport, TcpTransport) {
  T& t = shared_transport<T>();
  t.set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(120));
  const int rank = t.rank(), n = t.size();
  for (int64_t count : {int64_t{1}, int64_t(n + 1), int64_t{4099}, int64_t{300007}}) {
    CAPTURE(count);
    std::vector<float> ring(count), rd(count);
    for (int64_t i = 0; i < count; ++i) ring[i] = rd[i] = (rank + 1) * (1 + i % 7);
    ring_allreduce(t, {ring.data(), count, DType::f32}, ReduceOp::sum, /*segment_bytes=*/1000);
    recursive_doubling_allreduce(t, {rd.data(), count, DType::f32}, ReduceOp::min);
    int64_t bad = 0;
    for (int64_t i = 0; i < count; ++i) {
      bad += ring[i] != expected(ReduceOp::sum, DType::f32, n, i);
      bad += rd[i] != expected(ReduceOp::min, DType::f32, n, i);
    }
    CHECK(bad == 0);
  }
  t.set_deadline(T::Deadline::max());
}

TEST_CASE_TEMPLATE("past its deadline throws naming the peer, then refuses every call", T,
                   ShmTransport, TcpTransport) {
  if (transport().size() < 2) return;
  auto t = fresh<T>();
  REQUIRE(t);
  if (t->rank() == 0) {
    t->set_deadline(std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    char data[16];
    check_recv_times_out(*t, data, sizeof data);
    CHECK_THROWS_WITH_AS(t->send(data, sizeof data, 1), doctest::Contains("unusable"),
                         std::runtime_error);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE_TEMPLATE("a message of another length than expected throws on the receiver", T,
                   ShmTransport, TcpTransport) {
  if (transport().size() < 2) return;
  auto t = fresh<T>();
  REQUIRE(t);
  char data[16] = {};
  if (t->rank() == 0) t->send(data, 8, /*peer=*/1);
  if (t->rank() == 1) {
    CHECK_THROWS_WITH_AS(t->recv(data, 16, /*peer=*/0),
                         doctest::Contains("expected a message of 16 bytes from rank 0, got 8"),
                         std::runtime_error);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("TcpTransport: a peer that goes away is named at once, long before any deadline") {
  if (transport().size() < 2) return;
  auto t = fresh<TcpTransport>();
  REQUIRE(t);
  if (t->rank() == 1) t.reset();  // closes its connections, as an exiting process's are
  if (t && t->rank() == 0) {
    t->set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(60));
    const auto start = std::chrono::steady_clock::now();
    char data[16];
    CHECK_THROWS_WITH_AS(t->recv(data, sizeof data, /*peer=*/1),
                         doctest::Contains("rank 1 closed its connection"), std::runtime_error);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("TcpTransport: a rank that fails shuts its connections, so its peers fail at once") {
  if (transport().size() < 2) return;
  auto t = fresh<TcpTransport>();
  REQUIRE(t);
  char data[16] = {};
  if (t->rank() == 0) {  // waits for rank 1, which never sends, and gives up
    t->set_deadline(std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    check_recv_times_out(*t, data, sizeof data);
  }
  if (t->rank() == 1) {  // waits for rank 0 far longer than rank 0 waits for it
    t->set_deadline(std::chrono::steady_clock::now() + std::chrono::seconds(60));
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(t->recv(data, sizeof data, /*peer=*/0),
                         doctest::Contains("rank 0 closed its connection"), std::runtime_error);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("TcpTransport: an interface that does not exist is named on every rank") {
  MPI_Comm comm = dup_world();
  std::string why_not;
  MpiBootstrap bootstrap(comm);
  auto t = TcpTransport::create(bootstrap, {.interface = "no-such-if0"}, &why_not);
  MPI_Comm_free(&comm);
  CHECK(t == nullptr);
  CHECK_MESSAGE(why_not.find("rank 0: no network interface 'no-such-if0'") != std::string::npos,
                why_not);
}
