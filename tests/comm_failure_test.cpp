// Failure behaviour of MpiProcessGroup (issue 4 section 5), observed from outside: each
// case runs comm_failure_worker under mpiexec -n 3 (see its header for the scenarios),
// then checks the exit status, the messages every surviving rank printed, and that it all
// ended well within the time limit instead of hanging.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace {

struct Run {
  int status = -1;  // exit status of mpiexec (124: killed by timeout)
  std::string output;
  double seconds = 0;
};

Run run(const std::string& scenario, const std::string& mpiexec_flags = "") {
  const std::string command = "timeout 120 " + std::string(RINGFLOW_MPIEXEC) + " " +
                              mpiexec_flags + " -n 3 " + RINGFLOW_FAILURE_WORKER + " " +
                              scenario + " 2>&1";
  Run r;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer;
  size_t got = 0;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), got);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE(scenario << " " << mpiexec_flags << ": exit " << r.status << " after " << r.seconds
                   << " s\n" << r.output);
  return r;
}

// The launcher's flag that lets the job go on when a rank dies (tests/meson.build), and
// whether its exit status then still tells that ranks failed (Open MPI's mpirun exits 0).
constexpr const char* kKeepGoing = RINGFLOW_MPIEXEC_KEEP_GOING;
constexpr bool kKeepGoingExitStatus = RINGFLOW_KEEP_GOING_EXIT_STATUS;

int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("a rank that skips a collective: checking mode names it, the group recovers") {
  const Run r = run("skip-checked");
  CHECK(r.status == 0);
  CHECK(r.seconds < 60);
  // Ranks 1 and 2 fail after the 2 s timeout, naming the collective, its number and rank 0.
  CHECK(has(r.output, "rank 1: FAILED-AS-EXPECTED"));
  CHECK(has(r.output, "rank 2: FAILED-AS-EXPECTED"));
  CHECK(occurrences(r.output, "allreduce #0 (f32, 7 elements, sum, native) timed out after "
                              "2000 ms") >= 2);
  CHECK(occurrences(r.output, "rank 0 did not arrive") >= 2);
  // The broken group refuses its next collective at once; a new group works.
  CHECK(occurrences(r.output, "barrier #1 on rank") == 2);
  CHECK(occurrences(r.output, "unusable since") == 2);
  CHECK(occurrences(r.output, "RECOVERED, a new group's allreduce gave 3") == 3);
}

TEST_CASE("a rank that skips a collective: without checking mode, still an error in time") {
  const Run r = run("skip-native");
  CHECK(r.status == 0);
  CHECK(r.seconds < 60);
  CHECK(occurrences(r.output, "allreduce #0 (f32, 7 elements, sum, native) did not complete "
                              "within 2000 ms") >= 2);
  // The group's PeerWatch asks where the others are: rank 0 never began the collective.
  CHECK(occurrences(r.output, "did not arrive: it has begun no collective") >= 2);
  CHECK(occurrences(r.output, "rank 0 (process ") >= 2);
  CHECK(has(r.output, "the late allreduce completed the others' abandoned one"));
  CHECK(occurrences(r.output, "RECOVERED") == 3);
}

namespace {

// Ranks 1 and 2 fail at the 2 s deadline, rank 1's transport naming rank 0 in `named`.
void check_skipped_ring(const std::string& scenario, const std::string& named) {
  const Run r = run(scenario);
  CHECK(r.status == 0);
  CHECK(r.seconds < 60);
  CHECK(occurrences(r.output, "allreduce #0 (f32, 7 elements, sum, ring) failed on rank") >= 2);
  CHECK(has(r.output, named));
  CHECK(occurrences(r.output, "RECOVERED") == 3);
}

}  // namespace

TEST_CASE("a rank that skips our ring allreduce: the transport's deadline names the peer") {
  check_skipped_ring("skip-ring", "on rank 1 timed out waiting for rank 0");
}

TEST_CASE("a rank that skips our ring allreduce over TCP: named by the transport's deadline") {
  check_skipped_ring("skip-ring-tcp", "TcpTransport sendrecv on rank 1 timed out waiting for rank 0");
}

TEST_CASE("a rank that finalises and exits 0 early: the others fail naming it, exit non-zero") {
  const Run r = run("finalize-early");
  CHECK(r.status != 0);
  CHECK(r.status != 124);  // not the timeout of this test: no hang
  CHECK(r.seconds < 60);
  CHECK(occurrences(r.output, "allreduce #1 (f32, 7 elements, sum, native) timed out after "
                              "3000 ms") == 2);
  CHECK(occurrences(r.output, "rank 2 did not arrive") == 2);
}

TEST_CASE("a rank that dies: mpiexec ends the job at once, non-zero") {
  // MPICH's Hydra kills every other rank when one exits without MPI_Finalize (seen here:
  // exit 1 at once, or exit 9 with its "BAD TERMINATION" banner), before any timeout; Open
  // MPI's mpirun when one exits non-zero.
  const Run r = run("exit-early");
  CHECK(r.status != 0);
  CHECK(r.status != 124);
  CHECK(r.seconds < 60);
  CHECK(has(r.output, "rank 2: leaving early"));
}

TEST_CASE("a rank that dies, the job going on (-disable-auto-cleanup): the survivors name it at once") {
  // MPI never reports the dead peer; the group sees its process gone (PeerWatch), long
  // before the collective's 3 s timeout.
  const Run r = run("exit-early", kKeepGoing);
  CHECK((r.status != 0 || !kKeepGoingExitStatus));
  CHECK(r.status != 124);
  CHECK(r.seconds < 60);
  CHECK(occurrences(r.output, "allreduce #1 (f32, 7 elements, sum, native) failed on rank") == 2);
  CHECK(occurrences(r.output, "rank 2 (process ") == 2);
  CHECK(occurrences(r.output, "has exited while this rank waited in the fingerprint exchange") == 2);
  CHECK(occurrences(r.output, "timed out") == 0);
}

TEST_CASE("a rank that dies, ring over TCP: the survivors hear of it at once, not at the timeout") {
  const Run r = run("exit-early-tcp", kKeepGoing);
  CHECK((r.status != 0 || !kKeepGoingExitStatus));
  CHECK(r.status != 124);
  CHECK(r.seconds < 40);  // the collective's timeout is 60 s
  CHECK(occurrences(r.output, "over tcp") == 3);
  CHECK(occurrences(r.output, "allreduce #1 (f32, 7 elements, sum, ring) failed on rank") == 2);
  // Rank 0 reads from rank 2 in the ring; rank 1 hears either from rank 2 or from rank 0
  // giving up in turn, and then asks its PeerWatch which process exited: both name rank 2.
  CHECK(has(r.output, "rank 2 closed its connection"));
  CHECK(occurrences(r.output, ") has exited") == 2);
}

TEST_CASE("a rank that dies, ring over shared memory: the survivors see its process gone, not the timeout") {
  const Run r = run("exit-early-shm", kKeepGoing);
  CHECK((r.status != 0 || !kKeepGoingExitStatus));
  CHECK(r.status != 124);
  CHECK(r.seconds < 40);  // the collective's timeout is 60 s
  CHECK(occurrences(r.output, "over shm") == 3);
  CHECK(occurrences(r.output, "allreduce #1 (f32, 7 elements, sum, ring) failed on rank") == 2);
  // Each survivor waits for rank 2, or for a rank that gave up on it in turn.
  CHECK(has(r.output, "rank 2 (process "));
  CHECK(has(r.output, ") has exited while this rank waited for it"));
}

TEST_CASE("a program that never calls MPI: the group initialises and finalises it") {
  const Run r = run("self-init");
  CHECK(r.status == 0);
  CHECK(occurrences(r.output, "SELF-INIT allreduce gave 3") == 3);
  // Still initialised after the group is gone: finalised only at exit (Note [MPI lifecycle]).
  CHECK(occurrences(r.output, "finalized before exit: 0") == 3);
}
