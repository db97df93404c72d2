// launch_group: the process group that the launcher's environment calls for (see
// comm/bootstrap/launch.h): an MpiProcessGroup under mpiexec (or srun with PMI), a
// TransportProcessGroup met at the TCP rendezvous under torchrun's or Slurm's variables;
// and this rank's place on its node, from the node identities (no MPI_Comm_split_type).
#pragma once

#include <memory>
#include <string>

#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/group/queued_process_group.h"

namespace ringflow::comm {

struct LaunchOptions {
  Launcher launcher = Launcher::automatic;
  // What our algorithms talk through: "auto" (comm/transport/open_transport.h's choice,
  // else MPI point to point under MPI), "shm", "hybrid" (shared memory within hosts, TCP
  // across), "tcp", or "mpi" (MPI launches only).
  std::string transport = "auto";
  std::string socket_interface;  // as TcpTransportOptions::interface
  bool checking = false;         // fingerprints before each collective
  Timeout timeout = kDefaultTimeout;  // the rendezvous and each set-up exchange
};

struct LaunchedGroup {
  std::shared_ptr<QueuedProcessGroup> group;
  Launcher launcher = Launcher::mpi;  // resolved
  std::string transport;              // "shm", "shm+tcp", "tcp" or "mpi"
  NodeRanks node;                     // this rank among the ranks of its node
  std::string how;                    // "mpiexec (PMI)", "torchrun variables (...)", ...
};

// Collective over every rank the launcher started. Throws naming the flag-level choice that
// cannot be had here (--transport shm across nodes, mpi without MPI, ...).
LaunchedGroup launch_group(const LaunchOptions& options);

}  // namespace ringflow::comm
