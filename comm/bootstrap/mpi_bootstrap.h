// MpiBootstrap: the Bootstrap over an MPI communicator, for ranks that mpiexec (or srun
// with PMI) started. Borrows the communicator; MPI must be initialised.
#pragma once

#include <mpi.h>

#include "ringflow/comm/bootstrap/bootstrap.h"

namespace ringflow::comm {

class MpiBootstrap final : public Bootstrap {
 public:
  explicit MpiBootstrap(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::string> allgather(const std::string& mine) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace ringflow::comm
