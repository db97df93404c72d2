#include "ringflow/comm/group/launch_group.h"

#include <stdexcept>

#include "ringflow/comm/bootstrap/mpi_bootstrap.h"
#include "ringflow/comm/bootstrap/tcp_bootstrap.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/transport_process_group.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

void check_transport(const std::string& asked, const std::string& got, const std::string& why) {
  // "hybrid" is the flag's name for what the group reports as "shm+tcp".
  const std::string want = asked == "hybrid" ? transport_kind_name(TransportKind::hybrid) : asked;
  if (asked == "auto" || want == got) return;
  throw std::runtime_error(cat("--transport ", asked, ": could not be made here (the group fell back to ",
                               got, ")", why.empty() ? "" : ": " + why));
}

LaunchedGroup over_mpi(const LaunchOptions& o) {
  RF_CHECK(o.transport == "auto" || o.transport == "shm" || o.transport == "hybrid" ||
               o.transport == "tcp" || o.transport == "mpi",
           "--transport '", o.transport, "': expected auto, shm, hybrid, tcp or mpi");
  MpiProcessGroupOptions mo;
  mo.checking = o.checking;
  mo.shared_memory = o.transport == "auto" || o.transport == "shm" || o.transport == "hybrid";
  mo.sockets = o.transport == "auto" || o.transport == "tcp" || o.transport == "hybrid";
  mo.socket_interface = o.socket_interface;
  auto group = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, mo);
  check_transport(o.transport, group->transport_name(), group->why_not_tcp());
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
  RF_CHECK(o.transport == "auto" || o.transport == "shm" || o.transport == "hybrid" ||
               o.transport == "tcp",
           "--transport '", o.transport, "': ",
           o.transport == "mpi" ? "MPI point to point needs --launcher mpi (mpiexec)"
                                : "expected auto, shm, hybrid or tcp");
  const EnvLaunch env = *env_launch();
  TcpBootstrap bootstrap(bootstrap_options(env, o.timeout));
  auto group = std::make_shared<TransportProcessGroup>(
      bootstrap, TransportProcessGroupOptions{.checking = o.checking,
                                              .shared_memory = o.transport != "tcp",
                                              .socket_interface = o.socket_interface});
  check_transport(o.transport, group->transport_name(), "");
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
