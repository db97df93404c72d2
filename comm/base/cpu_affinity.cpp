#include "ringflow/comm/base/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

std::vector<int> allowed_cpus() { return thread_cpus(pthread_self()); }

std::vector<int> thread_cpus(pthread_t thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int err = pthread_getaffinity_np(thread, sizeof set, &set);
  RF_CHECK(err == 0, "pthread_getaffinity_np: ", std::strerror(err));
  return cpus_of(set);
}

void set_thread_cpus(pthread_t thread, const std::vector<int>& cpus, const std::string& what) {
  RF_CHECK(!cpus.empty(), what, ": no CPU given");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    RF_CHECK(c >= 0 && c < CPU_SETSIZE, what, ": CPU ", c, " is not a CPU number (0 to ",
             CPU_SETSIZE - 1, ")");
    CPU_SET(c, &set);
  }
  const int err = pthread_setaffinity_np(thread, sizeof set, &set);
  RF_CHECK(err == 0, what, ": cannot run on CPU(s) ", cpu_list_text(cpus), ": ",
           std::strerror(err), " (this process may use ", cpu_list_text(allowed_cpus()), ")");
}

ThreadPlacement place_comm_thread(const std::vector<int>& cpus, int local_rank, int local_size,
                                  int compute_threads) {
  RF_CHECK(local_size >= 1 && local_rank >= 0 && local_rank < local_size,
           "place_comm_thread: local rank ", local_rank, " of ", local_size);
  RF_CHECK(compute_threads >= 1, "place_comm_thread: ", compute_threads, " compute threads");
  const int n = static_cast<int>(cpus.size());
  const int base = n / local_size, extra = n % local_size;
  const int first = local_rank * base + std::min(local_rank, extra);
  const int share = base + (local_rank < extra ? 1 : 0);
  ThreadPlacement p;
  if (share <= compute_threads) {
    p.why = cat("no spare core: ", n, " CPU(s) for ", local_size, " rank(s) on this node leave ",
                share, " to this rank's ", compute_threads, " compute thread(s)");
    return p;
  }
  const std::vector<int> mine(cpus.begin() + first, cpus.begin() + first + share);
  p.comm_cpu = mine.back();
  p.compute_cpus.assign(mine.begin(), mine.end() - 1);
  p.why = cat("communication thread on CPU ", *p.comm_cpu, ", compute threads on ",
              cpu_list_text(p.compute_cpus));
  return p;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    s += cat(s.empty() ? "" : ",", cpus[i]);
    if (j > i) s += cat("-", cpus[j]);
    i = j + 1;
  }
  return s.empty() ? "none" : s;
}

}  // namespace ringflow::comm
