// ringflow's build and run-time report (kernels/build_info.h) with the MPI library's version
// added: what `train --version` prints and the metrics header records, gathered in one call.
#pragma once

#include <string>

#include "ringflow/kernels/build_info.h"

namespace ringflow::comm {

// MPI_Get_library_version's first line (e.g. "MPICH Version: 4.0.2", "Open MPI v4.1.4, ...").
// MPI allows the call before MPI_Init, so it starts nothing.
std::string mpi_library_version();

// ringflow::build_info() and {"MPI", mpi_library_version()}.
BuildInfo build_info();

}  // namespace ringflow::comm
