// The CPU backend's thread count: one OpenMP setting shared by oneDNN (built with the
// OpenMP runtime) and the backend's own loops. Default: OpenMP's (all cores, or
// OMP_NUM_THREADS when the user set it).
#include <stdexcept>
#include <string>

#include <omp.h>

#include "ringflow/kernels/backend.h"

namespace ringflow {

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: n must be >= 1, got " + std::to_string(n));
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace ringflow
