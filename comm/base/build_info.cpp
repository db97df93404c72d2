#include "ringflow/comm/base/build_info.h"

#include <mpi.h>

// meson.build passes the MPI it chose (-Dmpi) as RINGFLOW_MPI_MPICH or RINGFLOW_MPI_OPENMPI;
// mpi.h must be that MPI's, or headers and library disagree (e.g. an include path that
// Debian's alternatives point at the other MPI).
#if defined(RINGFLOW_MPI_OPENMPI) && !defined(OPEN_MPI)
#error "-Dmpi=openmpi, but mpi.h is not Open MPI's"
#elif defined(RINGFLOW_MPI_MPICH) && !defined(MPICH)
#error "-Dmpi=mpich, but mpi.h is not MPICH's"
#elif !defined(RINGFLOW_MPI_OPENMPI) && !defined(RINGFLOW_MPI_MPICH)
#error "meson.build passes RINGFLOW_MPI_MPICH or RINGFLOW_MPI_OPENMPI"
#endif

namespace ringflow::comm {

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown (MPI_Get_library_version failed)";
  std::string version(text, static_cast<size_t>(length));
  version = version.substr(0, version.find('\n'));
  for (char& c : version)
    if (c == '\t') c = ' ';  // MPICH's "MPICH Version:\t4.0.2"
  const size_t end = version.find_last_not_of(" \t\r");
  return end == std::string::npos ? "unknown (empty)" : version.substr(0, end + 1);
}

BuildInfo build_info() {
  BuildInfo info = ringflow::build_info();
  info.libraries.push_back({"MPI", mpi_library_version()});
  return info;
}

}  // namespace ringflow::comm
