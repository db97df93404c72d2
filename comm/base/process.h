// Whether a process of this node still runs: how a rank tells a dead peer from a slow one
// without waiting for a timeout.
#pragma once

namespace ringflow::comm {

// A zombie (killed, not yet reaped by its parent, such as mpiexec's proxy) counts as gone.
bool process_alive(int pid);

}  // namespace ringflow::comm
