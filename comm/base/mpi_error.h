// Internal to comm/ (not installed): MPI's error texts, for the MPI transport, the
// bootstrap and the process group.
#pragma once

#include <stdexcept>
#include <string>

namespace ringflow::comm::detail {

// MPI's text for an error code.
std::string mpi_error_text(int code);

// Throws std::runtime_error "<who>: <call> failed: <MPI's text>" unless code is MPI_SUCCESS.
void check_mpi(int code, const char* who, const char* call);

}  // namespace ringflow::comm::detail
