// Note [a killed supervisor]: killed alone (by hand, through the pid Hydra's banner shows,
// or by the OOM killer), a supervisor makes Hydra SIGKILL the other ranks' process groups at
// once, before they can report anything; its own rank, whose group leader is gone, is left.
// That rank learns of the death at once (a parent-death signal, which one thread waits
// for), says so on stderr and exits 1, so that the job ends with the rank and its
// supervisor named rather than in silence, and before the rank's own collectives fail
// blaming the ranks Hydra killed.
#include "ringflow/comm/bootstrap/rank_supervisor.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "ringflow/comm/base/process.h"
#include "ringflow/comm/bootstrap/launch.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_rank = 0;  // the supervised child, for the forwarding handler

void forward_to_rank(int sig) { ::kill(g_rank, sig); }

int threads_of_this_process() {
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
  ::closedir(dir);
  return n;
}

// The children that `pid`'s main thread started (the launcher's and the supervisors' are
// all started there), from /proc: one small file, not a walk over every process.
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

// Whether a rank beside this supervisor runs: a live child of another of the launcher's.
bool other_ranks_run(pid_t launcher) {
  for (pid_t supervisor : children_of(launcher)) {
    if (supervisor == ::getpid()) continue;
    for (pid_t rank : children_of(supervisor)) {
      if (process_alive(rank)) return true;
    }
  }
  return false;
}

// Whether the launcher started ranks on other nodes too (Hydra and mpirun tell each rank
// the job's size and its node's); when it does not say, assume so.
bool ranks_elsewhere() {
  const std::optional<MpiLaunch> launch = mpi_launch();
  return !launch || launch->size < 0 || launch->local_size < 0 || launch->size > launch->local_size;
}

// The launchers that end the job as soon as they reap a rank that failed: Hydra (its PMI
// socket, PMI_FD) and Open MPI's mpirun.
bool under_mpiexec() {
  return (std::getenv("PMI_FD") && std::getenv("PMI_RANK")) || std::getenv("OMPI_COMM_WORLD_RANK");
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

[[noreturn]] void wait_and_exit(pid_t child, pid_t launcher, std::chrono::milliseconds grace,
                                std::chrono::milliseconds other_nodes) {
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) std::_Exit(127);
  }
  for (int sig : kStopSignals) ::signal(sig, SIG_DFL);  // the rank's pid may be reused now
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) std::_Exit(0);
  const auto ended = Clock::now();
  while (Clock::now() < ended + grace && ::getppid() == launcher && other_ranks_run(launcher)) {
    std::this_thread::sleep_for(kLivenessPeriod);
  }
  if (WIFEXITED(status)) std::_Exit(WEXITSTATUS(status));
  if (ranks_elsewhere()) std::this_thread::sleep_until(ended + other_nodes);
  const rlimit no_core{0, 0};  // the rank dumped its own core if it was to
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(WTERMSIG(status), SIG_DFL);
  ::raise(WTERMSIG(status));
  std::_Exit(128 + WTERMSIG(status));  // a signal whose default is to go on
}

// The rank's thread that waits for its supervisor's death (Note [a killed supervisor]).
[[noreturn]] void report_supervisor_death(pid_t supervisor, sigset_t death) {
  siginfo_t info;
  while (::sigwaitinfo(&death, &info) < 0 || ::getppid() == supervisor) {
  }
  const char* rank = std::getenv("PMI_RANK");
  char line[256];
  const int n = std::snprintf(line, sizeof line,
                              "rank %s (process %d): its supervisor (process %d) has died; the rank "
                              "ends with it\n",
                              rank ? rank : "?", static_cast<int>(::getpid()),
                              static_cast<int>(supervisor));
  if (n > 0) (void)!::write(STDERR_FILENO, line, std::min(static_cast<size_t>(n), sizeof line - 1));
  std::_Exit(1);
}

}  // namespace

bool supervise_rank(std::chrono::milliseconds grace, std::chrono::milliseconds other_nodes) {
  if (!under_mpiexec()) return false;
  if (threads_of_this_process() != 1) return false;
  const pid_t launcher = ::getppid();
  const pid_t supervisor = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return false;
  if (child > 0) {
    g_rank = child;
    ::signal(SIGUSR1, SIG_IGN);
    for (int sig : kStopSignals) ::signal(sig, forward_to_rank);
    wait_and_exit(child, launcher, grace, other_nodes);
  }
  // The rank ends with its supervisor (killed alone, it would leave the rank running). The
  // signal is blocked before any other thread starts, so that only the watching thread
  // takes it.
  sigset_t death;
  sigemptyset(&death);
  sigaddset(&death, SIGRTMIN);
  ::pthread_sigmask(SIG_BLOCK, &death, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGRTMIN);
  if (::getppid() != supervisor) std::_Exit(1);
  std::thread([supervisor, death] { report_supervisor_death(supervisor, death); }).detach();
  return true;
}

}  // namespace ringflow::comm
