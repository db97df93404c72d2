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

}  // namespace ringflow::comm
