#include "ringflow/comm/bootstrap/mpi_bootstrap.h"

#include <climits>

#include "ringflow/comm/base/mpi_error.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

void check(int code, const char* call) { detail::check_mpi(code, "MpiBootstrap", call); }

}  // namespace

MpiBootstrap::MpiBootstrap(MPI_Comm comm) : comm_(comm) {
  RF_CHECK(comm != MPI_COMM_NULL, "MpiBootstrap: null communicator");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

std::vector<std::string> MpiBootstrap::allgather(const std::string& mine) {
  RF_CHECK(mine.size() <= INT_MAX, "MpiBootstrap::allgather: a blob of ", mine.size(),
           " bytes exceeds MPI's int count");
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size_), offsets(size_);
  check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  int64_t total = 0;
  for (int q = 0; q < size_; ++q) {
    offsets[q] = static_cast<int>(total);
    total += lengths[q];
  }
  RF_CHECK(total <= INT_MAX, "MpiBootstrap::allgather: ", total, " bytes in all exceed MPI's int count");
  std::string all(static_cast<size_t>(total), '\0');
  check(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                       MPI_CHAR, comm_),
        "MPI_Allgatherv");
  std::vector<std::string> blobs(size_);
  for (int q = 0; q < size_; ++q) blobs[q] = all.substr(offsets[q], lengths[q]);
  return blobs;
}

}  // namespace ringflow::comm
