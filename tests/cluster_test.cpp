// Run by bench/cluster, K ranks per emulated host (tests/meson.build; K from the
// RINGFLOW_RANKS_PER_HOST that bench/cluster sets): checks that MPI sees hosts of their own
// that talk TCP over the shaped links (so that what the cluster benchmarks measure is the
// network), that every allreduce algorithm (hierarchical too: within each host, then
// across) gives the right result over those links with the bytes of its closed form, through the group's own TCP connections and through MPI, at
// sizes where the links dominate: closed forms (rank r contributes (r+1) * k_i,
// k_i = 1 + i % 7, so a sum is n(n+1)/2 * k_i), and MPI's own result on random integers
// (exact whatever the order of the additions). The script's --verify-traffic then checks
// that the bytes went over the veth links. Under a plain `mpiexec -n 2` the first test
// case fails: run it through bench/cluster.
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/framework/ringflow.h"

// Inside the namespace: comm::ReduceOp hides the kernels' ringflow::ReduceOp.
namespace ringflow::comm {

namespace {

constexpr Algorithm kAlgorithms[] = {Algorithm::native, Algorithm::naive, Algorithm::tree,
                                     Algorithm::recursive_doubling, Algorithm::ring,
                                     Algorithm::hierarchical};

int ranks_per_host() {
  const char* v = std::getenv("RINGFLOW_RANKS_PER_HOST");
  return v ? std::atoi(v) : 1;
}

// A failing collective reports within this instead of hanging the test.
CollectiveOptions opts(Algorithm algo) {
  CollectiveOptions o;
  o.algorithm = algo;
  o.timeout = std::chrono::seconds(60);
  return o;
}

// Our algorithms over the group's own TCP connections, over those across hosts and shared
// memory within (the group's choice where hosts hold several ranks), or over MPI point to
// point.
MpiProcessGroupOptions checking(const std::string& transport) {
  MpiProcessGroupOptions o;
  o.checking = true;
  o.shared_memory = transport == "shm+tcp";
  o.sockets = transport == "tcp" || transport == "shm+tcp";
  return o;
}

// What the group picks by itself across these hosts.
std::string automatic_transport() { return ranks_per_host() > 1 ? "shm+tcp" : "tcp"; }

std::vector<std::string> transports() {
  std::vector<std::string> all = {"tcp", "mpi"};
  if (ranks_per_host() > 1) all.push_back("shm+tcp");
  return all;
}

double k_of(int64_t i) { return static_cast<double>(1 + i % 7); }

}  // namespace

TEST_CASE("every host runs its K ranks and talks TCP") {
  int n = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  INFO("run this test through bench/cluster");
  const int k = ranks_per_host();

  // MPICH's node map: ranks on one node would share memory instead of using the links.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  CHECK(node_size == k);

  // bench/cluster names each host after its namespace.
  std::vector<char> names(static_cast<size_t>(n) * MPI_MAX_PROCESSOR_NAME, '\0');
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(mine, &length);
  MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> distinct;
  for (int q = 0; q < n; ++q) distinct.insert(names.data() + q * MPI_MAX_PROCESSOR_NAME);
  CHECK(static_cast<int>(distinct.size()) * k == n);

  // UCX's shared-memory transports would reach across the namespaces (Note [one host,
  // one node, TCP only] in bench/cluster).
  const char* tls = std::getenv("UCX_TLS");
  CHECK(std::string(tls != nullptr ? tls : "(unset)") == "tcp,self");
}

TEST_CASE("allreduce over the links: every algorithm and transport, closed form, 4 B to 4 MB") {
  for (const std::string& transport : transports()) {
    CAPTURE(transport);
    MpiProcessGroup pg(MPI_COMM_WORLD, checking(transport));
    REQUIRE(pg.transport_name() == transport);
    const int n = pg.size(), r = pg.rank();
    struct Case {
      Tensor t;
      Algorithm a;
      std::shared_ptr<Work> w;
    };
    std::vector<Case> cases;
    for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {  // f32: up to 4 MB
      for (Algorithm a : kAlgorithms) {
        Tensor t = empty({count}, DType::f32);
        float* p = t.data<float>();
        for (int64_t i = 0; i < count; ++i) p[i] = static_cast<float>((r + 1) * k_of(i));
        cases.push_back({t, a, {}});
      }
    }
    for (Case& c : cases) c.w = pg.allreduce(c.t, opts(c.a));
    for (Case& c : cases) {
      c.w->wait();
      const float* p = c.t.data<float>();
      const int64_t count = c.t.numel();
      int64_t wrong = 0, first = -1;
      for (int64_t i = 0; i < count; ++i) {
        if (p[i] != static_cast<float>(n * (n + 1) / 2 * k_of(i))) {
          if (wrong++ == 0) first = i;
        }
      }
      INFO(std::string(algorithm_name(c.a))
           << " count " << count << ": first wrong element " << first);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("allreduce over the links: every algorithm and transport agrees with MPI_Allreduce, 8 MB") {
  for (const std::string& transport : transports()) {
    CAPTURE(transport);
    MpiProcessGroup pg(MPI_COMM_WORLD, checking(transport));
    REQUIRE(pg.transport_name() == transport);
    constexpr int64_t count = (int64_t{1} << 20) + 3;  // i64: 8 MB, not a multiple of n
    std::mt19937_64 gen(99 + pg.rank());
    std::uniform_int_distribution<int64_t> dist(-1000000, 1000000);
    Tensor base = empty({count}, DType::i64);
    for (int64_t i = 0; i < count; ++i) base.data<int64_t>()[i] = dist(gen);

    std::vector<int64_t> want(count);
    MPI_Allreduce(base.data<int64_t>(), want.data(), static_cast<int>(count), MPI_INT64_T, MPI_SUM,
                  MPI_COMM_WORLD);
    for (Algorithm a : kAlgorithms) {
      Tensor t = base.clone();
      pg.allreduce(t, opts(a))->wait();
      const int64_t* p = t.data<int64_t>();
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) wrong += p[i] != want[i];
      INFO(std::string(algorithm_name(a)));
      CHECK(wrong == 0);
    }
  }
}

// The group's view of the hosts, and what the hierarchical allreduce moves: each rank's
// counted bytes equal the closed form, so only the leaders' ring crosses the links.
TEST_CASE("hierarchical over the links: the hosts as MPI sees them, bytes as the closed form") {
  MpiProcessGroupOptions o;
  o.checking = true;
  MpiProcessGroup pg(MPI_COMM_WORLD, o);
  REQUIRE(pg.transport_name() == automatic_transport());
  const int n = pg.size(), r = pg.rank(), k = ranks_per_host();
  std::vector<int> want_hosts;
  for (int q = 0; q < n; ++q) want_hosts.push_back(q / k);  // Hydra fills host by host
  CHECK(pg.host_of() == want_hosts);
  constexpr int64_t count = (int64_t{1} << 20) + 5;
  Tensor t = full({count}, r + 1.0);
  auto w = pg.allreduce(t, opts(Algorithm::hierarchical));
  w->wait();
  const Traffic want = hierarchical_traffic(count, 4, pg.host_of(), r);
  CHECK(w->traffic().sent == want.sent);
  CHECK(w->traffic().received == want.received);
  CHECK(t.to_vector<float>() == std::vector<float>(count, static_cast<float>(n * (n + 1) / 2)));
  // automatic picks it for a large message where hosts hold several ranks.
  if (k > 1 && n > k) {  // (with one rank per host the two move the same bytes)
    const Traffic automatic = pg.allreduce_traffic_model(count, DType::f32, Algorithm::automatic);
    CHECK(automatic.sent == want.sent);
    CHECK(automatic.received == want.received);
  }
}

}  // namespace ringflow::comm
