// The CPU backend's thread count: one OpenMP setting shared by oneDNN (built with the
// OpenMP runtime) and the backend's own loops. Default: OpenMP's (all cores, or
// OMP_NUM_THREADS when the user set it).
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <omp.h>

#include "ringflow/kernels/backend.h"

namespace ringflow {

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: n must be >= 1, got " + std::to_string(n));
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

// Each OpenMP thread sets its own mask (the pool's threads exist from the first parallel
// region on, and later ones inherit the calling thread's).
void set_compute_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) throw std::invalid_argument("set_compute_cpus: no CPU given");
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string list;
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE)
      throw std::invalid_argument("set_compute_cpus: " + std::to_string(c) + " is not a CPU number");
    CPU_SET(c, &set);
    list += (list.empty() ? "" : ",") + std::to_string(c);
  }
  int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  int failed = 0;
#pragma omp parallel reduction(+ : failed)
  failed += pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0;
  if (err == 0 && failed > 0) err = EINVAL;
  if (err != 0)
    throw std::invalid_argument("set_compute_cpus: cannot run the compute threads on CPU(s) " +
                                list + ": " + std::strerror(err));
}

}  // namespace ringflow
