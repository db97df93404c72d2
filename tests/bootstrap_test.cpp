// TcpBootstrap (comm/bootstrap/tcp_bootstrap.h): ranks as threads of one process meeting at
// a rendezvous on localhost, as separate processes would: every rank sees every blob in
// rank order, and the set-up errors (a missing rank, a world size that disagrees, a rank
// twice) name what is wrong within the timeout instead of hanging. And the launch
// conventions (comm/bootstrap/launch.h) read from a given environment.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/comm/base/socket.h"
#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/bootstrap/tcp_bootstrap.h"
#include "ringflow/tests/loopback_ranks.h"

using namespace ringflow::comm;
using ringflow::free_port;
using ringflow::run_ranks;

namespace {

TcpBootstrapOptions options(int port, int rank, int size, int timeout_ms = 20000) {
  return {.master_addr = "127.0.0.1", .master_port = port, .rank = rank, .size = size,
          .timeout = std::chrono::milliseconds(timeout_ms)};
}

}  // namespace

TEST_CASE("TcpBootstrap: allgather and broadcast of blobs of any length, in rank order") {
  for (int size : {1, 2, 3, 5}) {
    CAPTURE(size);
    const int port = free_port();
    std::vector<std::vector<std::string>> seen(size);
    std::vector<std::string> broadcast(size);
    const auto errors = run_ranks(size, [&](int rank) {
      TcpBootstrap b(options(port, rank, size));
      CHECK(b.rank() == rank);
      CHECK(b.size() == size);
      seen[rank] = b.allgather(std::string(static_cast<size_t>(rank) * 1000, 'a' + rank));
      b.barrier();
      broadcast[rank] = b.broadcast(rank == size - 1 ? "from the last" : "", size - 1);
    });
    for (int r = 0; r < size; ++r) {
      CHECK_MESSAGE(errors[r].empty(), errors[r]);
      REQUIRE(seen[r].size() == static_cast<size_t>(size));
      for (int q = 0; q < size; ++q) {
        CHECK(seen[r][q] == std::string(static_cast<size_t>(q) * 1000, 'a' + q));
      }
      CHECK(broadcast[r] == "from the last");
    }
  }
}

TEST_CASE("TcpBootstrap: a rank that never comes is named by rank 0 at the timeout") {
  const int port = free_port();
  const auto errors = run_ranks(2, [&](int rank) {
    TcpBootstrap b(options(port, rank == 0 ? 0 : 1, 3, 1500));  // rank 2 never starts
  });
  CHECK_MESSAGE(errors[0].find("waiting for rank(s) 2 to connect") != std::string::npos, errors[0]);
  CHECK_MESSAGE(errors[0].find("127.0.0.1:" + std::to_string(port)) != std::string::npos, errors[0]);
}

TEST_CASE("TcpBootstrap: no rank 0 at the address: the others say so at the timeout") {
  const int port = free_port();
  const auto errors = run_ranks(1, [&](int) { TcpBootstrap b(options(port, 1, 2, 500)); });
  CHECK_MESSAGE(errors[0].find("could not reach rank 0") != std::string::npos, errors[0]);
}

TEST_CASE("TcpBootstrap: ranks that disagree on the world size, or a rank twice, are refused") {
  const int port = free_port();
  auto errors = run_ranks(2, [&](int rank) { TcpBootstrap b(options(port, rank, rank == 0 ? 2 : 3, 5000)); });
  CHECK_MESSAGE(errors[0].find("started for a world of 3 ranks, rank 0 for 2") != std::string::npos,
                errors[0]);
  CHECK_MESSAGE(errors[1].find("rank 0 refused this rank") != std::string::npos, errors[1]);

  const int port2 = free_port();
  errors = run_ranks(3, [&](int rank) { TcpBootstrap b(options(port2, rank == 2 ? 1 : rank, 3, 3000)); });
  CHECK_MESSAGE(errors[0].find("rank 1 connected twice") != std::string::npos, errors[0]);
}

TEST_CASE("TcpBootstrap: bad options are named") {
  CHECK_THROWS_WITH_AS(TcpBootstrap(options(29500, 3, 2)), doctest::Contains("rank 3 outside a world of 2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(TcpBootstrap(options(70000, 0, 2)), doctest::Contains("port 70000"),
                       std::invalid_argument);
  auto o = options(free_port(), 1, 2, 500);
  o.master_addr = "no-such-host.invalid";
  CHECK_THROWS_WITH_AS(TcpBootstrap{o}, doctest::Contains("cannot resolve host 'no-such-host.invalid'"),
                       std::runtime_error);
}

// ---------------------------------------------------------------- launch (comm/bootstrap/launch.h)

namespace {

Getenv env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("launch: torchrun's variables, with defaults for what a shell loop may leave out") {
  auto l = env_launch(env({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                           {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"},
                           {"MASTER_PORT", "31000"}}));
  REQUIRE(l.has_value());
  CHECK(l->rank == 2);
  CHECK(l->size == 4);
  CHECK(l->local_rank == 0);
  CHECK(l->local_size == 2);
  CHECK(l->master_addr == "node7");
  CHECK(l->master_port == 31000);
  auto bare = env_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  REQUIRE(bare.has_value());
  CHECK(bare->master_addr == "127.0.0.1");
  CHECK(bare->master_port == 29500);
  CHECK(bare->local_rank == -1);
  CHECK_FALSE(env_launch(env({})).has_value());
}

TEST_CASE("launch: torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) is met through") {
  std::map<std::string, std::string> vars{{"RANK", "1"}, {"WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29543"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                          {"TORCHELASTIC_RUN_ID", "job7"},
                                          {"TORCHELASTIC_RESTART_COUNT", "2"}};
  auto l = env_launch(env(vars));
  REQUIRE(l.has_value());
  CHECK(l->agent_store);
  CHECK(l->store_prefix == "ringflow/job7/attempt_2");  // a restarted group's keys are its own
  const TcpBootstrapOptions o = bootstrap_options(*l, std::chrono::milliseconds(1000));
  CHECK(o.through_store);
  CHECK(o.store_prefix == "ringflow/job7/attempt_2");
  CHECK(o.master_addr == "node0");
  CHECK(o.master_port == 29543);
  // torchrun 1.13's --standalone and c10d forms say False: rank 0 listens at MASTER_PORT.
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  CHECK_FALSE(env_launch(env(vars))->agent_store);
  CHECK_FALSE(bootstrap_options(*env_launch(env(vars)), std::chrono::milliseconds(1000)).through_store);
  auto bare = env_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "2"},
                              {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  CHECK(bare->store_prefix == "ringflow/none/attempt_0");
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["TORCHELASTIC_RESTART_COUNT"] = "again";
  CHECK_THROWS_WITH_AS(env_launch(env(vars)), doctest::Contains("TORCHELASTIC_RESTART_COUNT='again'"),
                       std::invalid_argument);
}

TEST_CASE("launch: Slurm's variables; several nodes need MASTER_ADDR") {
  auto l = env_launch(env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                           {"SLURM_NNODES", "1"}, {"SLURM_JOB_ID", "123456"}}));
  REQUIRE(l.has_value());
  CHECK(l->rank == 3);
  CHECK(l->size == 4);
  CHECK(l->local_rank == 1);
  CHECK(l->master_addr == "127.0.0.1");
  CHECK(l->master_port == 20000 + 123456 % 20000);
  CHECK_THROWS_WITH_AS(env_launch(env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"},
                                       {"SLURM_NNODES", "2"}})),
                       doctest::Contains("set MASTER_ADDR"), std::invalid_argument);
}

TEST_CASE("launch: bad values are named") {
  CHECK_THROWS_WITH_AS(env_launch(env({{"RANK", "4"}, {"WORLD_SIZE", "4"}})),
                       doctest::Contains("RANK='4' is not an integer in 0..3"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(env_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "two"}})),
                       doctest::Contains("WORLD_SIZE='two'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(env_launch(env({{"RANK", "0"}})), doctest::Contains("WORLD_SIZE is not set"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(env_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "99999"}})),
                       doctest::Contains("MASTER_PORT='99999'"), std::invalid_argument);
}

TEST_CASE("launch: an MPI launcher's variables, Open MPI's before the PMI ones") {
  auto ompi = mpi_launch(env({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"PMIX_RANK", "3"}}));
  REQUIRE(ompi.has_value());
  CHECK(ompi->rank == 3);
  CHECK(ompi->size == 4);
  CHECK(ompi->local_rank == 1);
  CHECK(ompi->local_size == 2);
  CHECK(std::string(ompi->source).find("Open MPI") != std::string::npos);
  auto hydra = mpi_launch(env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"},
                               {"MPI_LOCALNRANKS", "1"}}));
  REQUIRE(hydra.has_value());
  CHECK(hydra->rank == 1);
  CHECK(hydra->size == 2);
  CHECK(hydra->local_rank == 0);
  CHECK(hydra->local_size == 1);
  auto pmix = mpi_launch(env({{"PMIX_RANK", "5"}}));
  REQUIRE(pmix.has_value());
  CHECK(pmix->rank == 5);
  CHECK(pmix->size == -1);
  CHECK(pmix->local_rank == -1);
  CHECK_FALSE(mpi_launch(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).has_value());
  CHECK_THROWS_WITH_AS(mpi_launch(env({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                       doctest::Contains("OMPI_COMM_WORLD_RANK='2' is not an integer in 0..1"),
                       std::invalid_argument);
}

TEST_CASE("launch: auto picks MPI under an MPI launcher, env under torchrun or Slurm, else MPI") {
  CHECK(resolve_launcher(Launcher::automatic, env({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"},
                                                   {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}})) ==
        Launcher::mpi);
  CHECK(resolve_launcher(Launcher::automatic, env({{"RANK", "0"}, {"WORLD_SIZE", "2"}})) == Launcher::env);
  CHECK(resolve_launcher(Launcher::automatic, env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}})) ==
        Launcher::env);
  CHECK(resolve_launcher(Launcher::automatic, env({{"OMPI_COMM_WORLD_RANK", "0"},
                                                   {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"},
                                                   {"WORLD_SIZE", "2"}})) == Launcher::mpi);
  CHECK(resolve_launcher(Launcher::automatic, env({})) == Launcher::mpi);
  CHECK(resolve_launcher(Launcher::mpi, env({{"RANK", "0"}, {"WORLD_SIZE", "2"}})) == Launcher::mpi);
  CHECK_THROWS_WITH_AS(resolve_launcher(Launcher::env, env({})), doctest::Contains("RANK, WORLD_SIZE"),
                       std::invalid_argument);
}
