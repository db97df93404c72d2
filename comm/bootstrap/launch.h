// Launch: how a process learns its place among the ranks from whatever started it:
// mpiexec (or srun with PMI) for MPI; torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and TORCHELASTIC_USE_AGENT_STORE where its
// agent holds MASTER_PORT as a PyTorch TCPStore), which a shell loop can set as well; or
// Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). The last two meet through the
// TCP rendezvous (TcpBootstrap), without MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "ringflow/comm/bootstrap/tcp_bootstrap.h"

namespace ringflow::comm {

enum class Launcher : uint8_t { automatic, mpi, env };

const char* launcher_name(Launcher launcher);             // "auto", "mpi", "env"
Launcher launcher_from_name(const std::string& name);     // throws naming the choices

// A process's place as the environment gives it.
struct EnvLaunch {
  int rank = 0;
  int size = 1;
  int local_rank = -1;  // -1: not given (the group finds it from the node identities)
  int local_size = -1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent keeps a TCPStore at MASTER_ADDR:
  // MASTER_PORT (its static --master_addr/--master_port form; --standalone and c10d since
  // PyTorch 2.4), and the ranks meet through it, under a prefix of the run
  // (TORCHELASTIC_RUN_ID) and restart (TORCHELASTIC_RESTART_COUNT).
  bool agent_store = false;
  std::string store_prefix;  // "ringflow/<run id>/attempt_<restart count>"
  std::string source;  // which variables: "torchrun (RANK, WORLD_SIZE, ...)" or "Slurm (...)"
};

using Getenv = std::function<const char*(const char*)>;

// torchrun's variables (RANK and WORLD_SIZE set), else Slurm's (SLURM_PROCID and
// SLURM_NTASKS set), else nullopt. Throws std::invalid_argument naming the variable whose
// value is not an integer in range, and for Slurm across several nodes without MASTER_ADDR
// (rank 0's node is not known here).
std::optional<EnvLaunch> env_launch(const Getenv& getenv);
std::optional<EnvLaunch> env_launch();  // from this process's environment

// A process's place as an MPI launcher gives it, read before MPI is initialised: Open MPI's
// mpirun sets OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; MPICH's Hydra (and
// srun with PMI-2) PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS; a PMIx launcher
// (srun --mpi=pmix) PMIX_RANK alone. Only MPI itself tells more.
struct MpiLaunch {
  int rank = 0;
  int size = -1;  // -1: not given (PMIx)
  int local_rank = -1;  // -1: not given
  int local_size = -1;
  const char* source = "";  // the launcher and its variables, for messages
};

// The first of those launchers whose rank variable is set, else nullopt. Throws
// std::invalid_argument naming a variable whose value is not an integer in range.
std::optional<MpiLaunch> mpi_launch(const Getenv& getenv);
std::optional<MpiLaunch> mpi_launch();  // from this process's environment

// What `asked` means here: automatic picks MPI when mpi_launch finds an MPI launcher's
// variables, else env when env_launch finds one, else MPI (a single process). env without
// the variables throws naming them.
Launcher resolve_launcher(Launcher asked, const Getenv& getenv);
Launcher resolve_launcher(Launcher asked);

// The TCP rendezvous for an env launch, each exchange bounded by timeout.
TcpBootstrapOptions bootstrap_options(const EnvLaunch& launch, std::chrono::milliseconds timeout);

}  // namespace ringflow::comm
