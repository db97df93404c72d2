#include "ringflow/comm/group/launch_group.h"

#include <stdexcept>

#include "ringflow/comm/bootstrap/mpi_bootstrap.h"
#include "ringflow/comm/bootstrap/tcp_bootstrap.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/transport_process_group.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {

const char* group_transport_name(GroupTransport t) {
  switch (t) {
    case GroupTransport::automatic: return "auto";
    case GroupTransport::shm: return "shm";
    case GroupTransport::hybrid: return "hybrid";
    case GroupTransport::tcp: return "tcp";
    case GroupTransport::mpi: return "mpi";
  }
  return "?";
}

std::optional<TransportKind> transport_kind_of(GroupTransport t) {
  switch (t) {
    case GroupTransport::automatic: return TransportKind::automatic;
    case GroupTransport::shm: return TransportKind::shm;
    case GroupTransport::hybrid: return TransportKind::hybrid;
    case GroupTransport::tcp: return TransportKind::tcp;
    case GroupTransport::mpi: break;
  }
  return std::nullopt;
}

TransportError::TransportError(GroupTransport asked, const std::string& detail)
    : std::invalid_argument(cat("transport ", group_transport_name(asked), ": ", detail)),
      asked(asked),
      detail(detail) {}

namespace {

// What a group's own transport is (none: MPI point to point).
GroupTransport made(std::optional<TransportKind> kind) {
  if (!kind) return GroupTransport::mpi;
  switch (*kind) {
    case TransportKind::shm: return GroupTransport::shm;
    case TransportKind::hybrid: return GroupTransport::hybrid;
    case TransportKind::tcp: return GroupTransport::tcp;
    case TransportKind::automatic: break;
  }
  return GroupTransport::automatic;
}

void check_transport(GroupTransport asked, GroupTransport got, const std::string& name,
                     const std::string& why) {
  if (asked == GroupTransport::automatic || asked == got) return;
  throw TransportError(asked, cat("could not be made here (the group fell back to ", name, ")",
                                  why.empty() ? "" : ": " + why));
}

LaunchedGroup over_mpi(const LaunchOptions& o) {
  const GroupTransport t = o.transport;
  MpiProcessGroupOptions mo;
  mo.checking = o.checking;
  mo.shared_memory = t == GroupTransport::automatic || t == GroupTransport::shm || t == GroupTransport::hybrid;
  mo.sockets = t == GroupTransport::automatic || t == GroupTransport::tcp || t == GroupTransport::hybrid;
  mo.socket_interface = o.socket_interface;
  auto group = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, mo);
  check_transport(t, made(group->transport_kind()), group->transport_name(), group->why_not_tcp());
  MpiBootstrap bootstrap(MPI_COMM_WORLD);
  LaunchedGroup l;
  l.node = node_ranks(bootstrap.allgather(node_identity()), group->rank());
  l.group = group;
  l.launcher = Launcher::mpi;
  l.transport = group->transport_name();
  l.how = "MPI (mpiexec, or srun with PMI)";
  return l;
}

LaunchedGroup over_env(const LaunchOptions& o) {
  if (o.transport == GroupTransport::mpi)
    throw TransportError(o.transport, "MPI point to point needs an MPI launch (mpiexec, or srun "
                                      "with PMI), not torchrun's or Slurm's variables");
  const EnvLaunch env = *env_launch();
  TcpBootstrap bootstrap(bootstrap_options(env, o.timeout));
  auto group = std::make_shared<TransportProcessGroup>(
      bootstrap, TransportProcessGroupOptions{.checking = o.checking,
                                              .shared_memory = o.transport != GroupTransport::tcp,
                                              .socket_interface = o.socket_interface});
  check_transport(o.transport, made(group->transport_kind()), group->transport_name(), "");
  LaunchedGroup l;
  l.node = node_ranks(bootstrap.allgather(node_identity()), env.rank);
  // The launcher's word, where it gave one: it knows the machines' layout.
  if (env.local_rank >= 0) l.node.local_rank = env.local_rank;
  if (env.local_size >= 1) l.node.local_size = env.local_size;
  l.group = group;
  l.launcher = Launcher::env;
  l.transport = group->transport_name();
  l.how = cat(env.source, ", rendezvous at ", env.master_addr, ":", env.master_port);
  return l;
}

}  // namespace

LaunchedGroup launch_group(const LaunchOptions& options) {
  return resolve_launcher(options.launcher) == Launcher::env ? over_env(options)
                                                              : over_mpi(options);
}

}  // namespace ringflow::comm
