// Whether a process of this node still runs: how a rank tells a dead peer from a slow one
// without waiting for a timeout.
#pragma once

#include <chrono>

namespace ringflow::comm {

// How often a waiting rank looks whether its peers still run. Under `mpiexec
// -disable-auto-cleanup` on one node Hydra still ends the job about 100 ms after a rank
// dies (measured: 0.08-0.12 s, whatever the survivors do); looking every 100 ms, the
// survivors' reports were mostly lost, every 10 ms they got out. A look costs microseconds.
constexpr std::chrono::milliseconds kLivenessPeriod{10};

// A zombie (killed, not yet reaped by its parent, such as mpiexec's proxy) counts as gone.
bool process_alive(int pid);

}  // namespace ringflow::comm
