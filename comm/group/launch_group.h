// launch_group: the process group that the launcher's environment calls for (see
// comm/bootstrap/launch.h): an MpiProcessGroup under mpiexec (or srun with PMI), a
// TransportProcessGroup met at the TCP rendezvous under torchrun's or Slurm's variables;
// and this rank's place on its node, from the node identities (no MPI_Comm_split_type).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/group/queued_process_group.h"
#include "ringflow/comm/transport/open_transport.h"

namespace ringflow::comm {

// What our allreduce algorithms talk through: auto (comm/transport/open_transport.h's
// choice, else MPI point to point under MPI), shm, hybrid (shared memory within hosts, TCP
// across), tcp, or mpi (MPI point to point: MPI launches only).
enum class GroupTransport : uint8_t { automatic, shm, hybrid, tcp, mpi };
const char* group_transport_name(GroupTransport t);  // "auto", "shm", "hybrid", "tcp", "mpi"
// What open_transport is asked to make for it (mpi: none, MPI point to point).
std::optional<TransportKind> transport_kind_of(GroupTransport t);

// The transport asked for cannot be had here: what was asked, and why (a sentence without
// the subject, e.g. "could not be made here (the group fell back to tcp): ...").
class TransportError : public std::invalid_argument {
 public:
  TransportError(GroupTransport asked, const std::string& detail);
  GroupTransport asked;
  std::string detail;
};

struct LaunchOptions {
  Launcher launcher = Launcher::automatic;
  GroupTransport transport = GroupTransport::automatic;
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

// Collective over every rank the launcher started. Throws TransportError where the transport
// asked for cannot be had here (shm across nodes, mpi without an MPI launch, ...).
LaunchedGroup launch_group(const LaunchOptions& options);

}  // namespace ringflow::comm
