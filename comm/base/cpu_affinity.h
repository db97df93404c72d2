// Which CPUs a thread may run on: the process's own set, a thread's, and where a rank's
// communication thread goes so that it takes no core from the computation (train's
// --comm-thread-cpu). Linux sched_setaffinity numbering.
#pragma once

#include <pthread.h>

#include <optional>
#include <string>
#include <vector>

namespace ringflow::comm {

// The CPUs the calling thread may run on, ascending.
std::vector<int> allowed_cpus();
// The CPUs `thread` may run on, ascending.
std::vector<int> thread_cpus(pthread_t thread);
// Restricts `thread` to `cpus` (non-empty). Throws std::invalid_argument naming `what` and
// the CPUs when the kernel refuses them (a CPU outside the process's set, or none online).
void set_thread_cpus(pthread_t thread, const std::vector<int>& cpus, const std::string& what);

// Where a rank's threads go: the communication thread on a core of its own, the compute
// threads on the others of the rank's share.
struct ThreadPlacement {
  std::optional<int> comm_cpu;  // none: leave the threads where they are
  std::vector<int> compute_cpus;
  std::string why;              // for the log: what was chosen, or why nothing was
};

// --comm-thread-cpu auto: the node's `cpus` (allowed_cpus()) are shared evenly among its
// `local_size` ranks in rank order (the first ranks take one more where they do not divide);
// where local_rank's share has a core beyond its `compute_threads`, the communication
// thread takes the share's last core and the compute threads the rest. Otherwise nothing
// moves: a pinned thread on a core the computation needs would only wait for it.
ThreadPlacement place_comm_thread(const std::vector<int>& cpus, int local_rank, int local_size,
                                  int compute_threads);

// A text such as "0-3,8" for the log.
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace ringflow::comm
