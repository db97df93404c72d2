// The failure scenarios of issue 4 section 5, one per run, started under mpiexec by
// comm_failure_test.cpp (which checks the output, the exit status and the time taken):
//   skip-checked   rank 0 skips allreduce #0; checking mode on, timeout 2 s
//   skip-native    rank 0 skips a native allreduce; checking mode off, timeout 2 s
//   skip-ring      rank 0 skips a ring allreduce; checking mode off, timeout 2 s
//   skip-ring-tcp  the same with the ring over TcpTransport (shared memory off)
//   exit-early     the last rank dies (std::_Exit(1), no MPI_Finalize) before allreduce #1
//   finalize-early the last rank calls MPI_Finalize and returns 0 before allreduce #1
//   exit-early-tcp the last rank dies before allreduce #1, a ring over TcpTransport with
//                  a 60 s timeout and checking mode off: the others hear of it at once
//   self-init      main never calls MPI: the group initialises it, finalises at exit
// Every rank prints "rank R: ..." lines; "FAILED-AS-EXPECTED" lines carry the CommError.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/framework/ringflow.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

CollectiveOptions with_timeout(std::chrono::milliseconds timeout,
                               Algorithm algorithm = Algorithm::native) {
  CollectiveOptions o;
  o.algorithm = algorithm;
  o.timeout = timeout;
  return o;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Waits for `work`; prints its error. Returns true when it failed.
bool report(int rank, Work& work, Clock::time_point start) {
  try {
    work.wait();
    std::printf("rank %d: %s completed\n", rank, work.description().c_str());
    std::fflush(stdout);
    return false;
  } catch (const CommError& e) {
    std::printf("rank %d: FAILED-AS-EXPECTED after %.2f s: %s\n", rank, seconds_since(start),
                e.what());
    std::fflush(stdout);
    return true;
  }
}

// All ranks: a fresh group works after the failure.
void recover(int rank, MpiProcessGroupOptions options) {
  MPI_Barrier(MPI_COMM_WORLD);
  MpiProcessGroup fresh(MPI_COMM_WORLD, options);
  Tensor t = full({5}, 1.0, DType::f32);
  fresh.allreduce(t, with_timeout(std::chrono::seconds(30)))->wait();
  std::printf("rank %d: RECOVERED, a new group's allreduce gave %g\n", rank,
              t.to_vector<double>()[0]);
  std::fflush(stdout);
}

int skip(bool checked, Algorithm algorithm = Algorithm::native, bool tcp = false) {
  MpiProcessGroupOptions options;
  options.checking = checked;
  options.shared_memory = !tcp;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    MpiProcessGroup pg(MPI_COMM_WORLD, options);
    Tensor t = full({7}, 1.0, DType::f32);
    const auto start = Clock::now();
    if (rank != 0) {
      auto work = pg.allreduce(t, with_timeout(std::chrono::seconds(2), algorithm));
      if (!report(rank, *work, start)) return 1;
      // The group is now broken: the next collective fails at once.
      auto next = pg.barrier(with_timeout(std::chrono::seconds(2)));
      report(rank, *next, Clock::now());
    }
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 waits until the others have failed
    if (rank == 0 && !checked && algorithm == Algorithm::native) {
      // The others' MPI_Iallreduce is still pending in MPI (a collective request cannot be
      // cancelled): issue the matching one so that it completes and nothing is left over.
      auto late = pg.allreduce(t, with_timeout(std::chrono::seconds(30)));
      late->wait();
      std::printf("rank 0: the late allreduce completed the others' abandoned one\n");
    }
  }
  recover(rank, options);
  return 0;
}

// ring: the second allreduce is our ring (over TCP, or shared memory without tcp), which
// finds out itself (no fingerprint round over MPI first), long before its 60 s timeout.
int exit_early(bool finalize, bool tcp = false, bool ring = false) {
  ring = ring || tcp;
  MpiProcessGroupOptions options;
  options.checking = !ring;
  options.shared_memory = !tcp;
  const CollectiveOptions second =
      ring ? with_timeout(std::chrono::seconds(60), Algorithm::ring) : with_timeout(std::chrono::seconds(3));
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MpiProcessGroup pg(MPI_COMM_WORLD, options);
  std::printf("rank %d: our algorithms over %s\n", rank, pg.transport_name().c_str());
  Tensor t = full({7}, 1.0, DType::f32);
  pg.allreduce(t, with_timeout(std::chrono::seconds(30)))->wait();  // #0: everyone
  // The survivors wait for each other before exiting: the first exit makes mpiexec kill
  // the rest, and under load a survivor may still be inside its timeout then.
  MPI_Comm survivors = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank == size - 1 ? MPI_UNDEFINED : 0, rank, &survivors);
  if (rank == size - 1) {
    std::printf("rank %d: leaving early (%s)\n", rank,
                finalize ? "MPI_Finalize, exit 0" : "_Exit(1), no MPI_Finalize");
    std::fflush(stdout);
    if (!finalize) std::_Exit(1);
    return -1;  // main finalises and exits 0
  }
  const auto start = Clock::now();
  auto work = pg.allreduce(t, second);  // #1
  const bool failed = report(rank, *work, start);
  MPI_Barrier(survivors);
  // The survivors exit non-zero with the message above, never hang.
  std::exit(failed ? 3 : 0);
}

}  // namespace
}  // namespace ringflow::comm

// The program does not touch MPI: the group initialises it and finalises it at exit.
int self_init() {
  int rank = 0;
  {
    ringflow::comm::MpiProcessGroup pg;
    rank = pg.rank();
    ringflow::Tensor t = ringflow::full({3}, 1.0, ringflow::DType::f32);
    pg.allreduce(t)->wait();
    std::printf("rank %d: SELF-INIT allreduce gave %g\n", rank, t.to_vector<double>()[0]);
    std::fflush(stdout);
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  std::printf("rank %d: finalized before exit: %d\n", rank, finalized);
  return 0;
}

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "self-init") return self_init();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 2;
  try {
    if (scenario == "skip-checked") rc = ringflow::comm::skip(/*checked=*/true);
    else if (scenario == "skip-native") rc = ringflow::comm::skip(/*checked=*/false);
    else if (scenario == "skip-ring") rc = ringflow::comm::skip(false, ringflow::comm::Algorithm::ring);
    else if (scenario == "skip-ring-tcp") rc = ringflow::comm::skip(false, ringflow::comm::Algorithm::ring, true);
    else if (scenario == "exit-early") rc = ringflow::comm::exit_early(/*finalize=*/false);
    else if (scenario == "finalize-early") rc = ringflow::comm::exit_early(/*finalize=*/true);
    else if (scenario == "exit-early-tcp") rc = ringflow::comm::exit_early(false, /*tcp=*/true);
    else if (scenario == "exit-early-shm") rc = ringflow::comm::exit_early(false, false, /*ring=*/true);
    else std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uncaught: %s\n", e.what());
    rc = 4;
  }
  if (rc == -1) rc = 0;
  MPI_Finalize();
  return rc;
}
