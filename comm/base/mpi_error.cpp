#include "ringflow/comm/base/mpi_error.h"

#include <mpi.h>

#include <stdexcept>

#include "ringflow/framework/error.h"

namespace ringflow::comm::detail {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, len);
}

void check_mpi(int code, const char* who, const char* call) {
  if (code != MPI_SUCCESS) {
    throw std::runtime_error(cat(who, ": ", call, " failed: ", mpi_error_text(code)));
  }
}

}  // namespace ringflow::comm::detail
