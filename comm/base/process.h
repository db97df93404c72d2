// Whether a process of this node still runs: how a rank tells a dead peer from a slow one
// without waiting for a timeout.
#pragma once

#include <chrono>

namespace ringflow::comm {

// How often a waiting rank looks whether its peers still run: a dead rank is named within
// milliseconds, and a look costs microseconds.
constexpr std::chrono::milliseconds kLivenessPeriod{10};

// A zombie (killed, not yet reaped by its parent, such as mpiexec's proxy) counts as gone.
bool process_alive(int pid);
// Stopped by a signal (SIGSTOP, SIGTSTP) or held by a debugger: it runs no further until
// someone continues it.
bool process_stopped(int pid);

}  // namespace ringflow::comm
