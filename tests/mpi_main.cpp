// doctest main for tests run under mpiexec: initialises MPI with MPI_THREAD_MULTIPLE
// (the process groups' communication threads need it), runs the test cases on every rank,
// and finalises. Each rank prints its own doctest summary; the exit code is non-zero on
// every rank when any rank failed, so that mpiexec reports the failure whichever rank
// saw it. Each rank's doctest output is buffered and rank 0 prints them in rank order, so
// that the summaries (which .ci/run sums) are never interleaved.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
      provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "MPI_Init_thread did not provide MPI_THREAD_MULTIPLE\n");
    return 2;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::ostringstream out;
  doctest::Context context(argc, argv);
  context.setCout(&out);
  // Plain text for the buffer, which is read back (.ci/run sums the summaries): Open MPI's
  // mpirun gives its ranks a terminal, where doctest would colour it.
  context.setOption("no-colors", true);
  const int failed = context.run() != 0 ? 1 : 0;

  const std::string text = out.str();
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(size), offsets(size);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    for (int q = 0, at = 0; q < size; at += lengths[q], ++q) offsets[q] = at;
    all.resize(offsets[size - 1] + lengths[size - 1]);
  }
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
              MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int q = 0; q < size; ++q) {
      std::printf("---- rank %d of %d\n%.*s", q, size, lengths[q], all.data() + offsets[q]);
    }
    std::fflush(stdout);
  }
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  if (any_failed && !failed) std::fprintf(stderr, "rank %d: another rank failed\n", rank);
  return any_failed;
}
