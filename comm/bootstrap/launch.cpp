#include "ringflow/comm/bootstrap/launch.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <stdexcept>

#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

// The variable's integer value in [low, high]; nullopt when it is not set.
std::optional<int> int_var(const Getenv& getenv, const char* name, int low, int high) {
  const char* text = getenv(name);
  if (text == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  RF_CHECK(*text != '\0' && *end == '\0' && errno == 0 && value >= low && value <= high,
           "launch: ", name, "='", text, "' is not an integer in ", low, "..", high);
  return static_cast<int>(value);
}

std::optional<EnvLaunch> torchrun_launch(const Getenv& getenv) {
  if (!getenv("RANK") && !getenv("WORLD_SIZE")) return std::nullopt;
  RF_CHECK(getenv("RANK") && getenv("WORLD_SIZE"), "launch: ",
           getenv("RANK") ? "WORLD_SIZE" : "RANK", " is not set, but ",
           getenv("RANK") ? "RANK" : "WORLD_SIZE", " is: set both (torchrun's convention)");
  EnvLaunch l;
  l.size = *int_var(getenv, "WORLD_SIZE", 1, INT_MAX);
  l.rank = *int_var(getenv, "RANK", 0, l.size - 1);
  l.local_rank = int_var(getenv, "LOCAL_RANK", 0, l.size - 1).value_or(-1);
  l.local_size = int_var(getenv, "LOCAL_WORLD_SIZE", 1, l.size).value_or(-1);
  if (const char* addr = getenv("MASTER_ADDR"); addr && *addr) l.master_addr = addr;
  l.master_port = int_var(getenv, "MASTER_PORT", 1, 65535).value_or(l.master_port);
  l.source = "torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)";
  // torchrun writes Python's str(True); PyTorch's own ranks test for exactly that.
  const char* agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store && std::string(agent_store) == "True") {
    const char* run = getenv("TORCHELASTIC_RUN_ID");
    const int restart = int_var(getenv, "TORCHELASTIC_RESTART_COUNT", 0, INT_MAX).value_or(0);
    l.agent_store = true;
    l.store_prefix = cat("ringflow/", run && *run ? run : "none", "/attempt_", restart);
    l.source = "torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and its agent's "
               "TCPStore (TORCHELASTIC_USE_AGENT_STORE)";
  }
  return l;
}

std::optional<EnvLaunch> slurm_launch(const Getenv& getenv) {
  if (!getenv("SLURM_PROCID") || !getenv("SLURM_NTASKS")) return std::nullopt;
  EnvLaunch l;
  l.size = *int_var(getenv, "SLURM_NTASKS", 1, INT_MAX);
  l.rank = *int_var(getenv, "SLURM_PROCID", 0, l.size - 1);
  l.local_rank = int_var(getenv, "SLURM_LOCALID", 0, l.size - 1).value_or(-1);
  const int nodes = int_var(getenv, "SLURM_NNODES", 1, INT_MAX).value_or(1);
  if (const char* addr = getenv("MASTER_ADDR"); addr && *addr) {
    l.master_addr = addr;
  } else {
    RF_CHECK(nodes == 1, "launch: Slurm runs this job on ", nodes, " nodes: set MASTER_ADDR "
             "to the first node's address, e.g. MASTER_ADDR=$(scontrol show hostnames "
             "\"$SLURM_JOB_NODELIST\" | head -n 1)");
  }
  // A port of the job's own, so that two jobs sharing a node do not meet.
  const int job = int_var(getenv, "SLURM_JOB_ID", 0, INT_MAX).value_or(0);
  l.master_port = int_var(getenv, "MASTER_PORT", 1, 65535).value_or(20000 + job % 20000);
  l.source = "Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID)";
  return l;
}

// Each MPI launcher's variables; Open MPI's first, since its mpirun sets PMIX_RANK as well.
struct MpiLauncherVars {
  const char *rank, *size, *local_rank, *local_size, *source;
};
constexpr MpiLauncherVars kMpiLaunchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI's mpirun (OMPI_COMM_WORLD_RANK, ...)"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
     "PMI, as MPICH's Hydra sets it (PMI_RANK, PMI_SIZE, ...)"},
    {"PMIX_RANK", nullptr, nullptr, nullptr, "PMIx (PMIX_RANK)"},
};

const char* process_getenv(const char* name) { return std::getenv(name); }

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::automatic: return "auto";
    case Launcher::mpi: return "mpi";
    case Launcher::env: return "env";
  }
  return "?";
}

Launcher launcher_from_name(const std::string& name) {
  for (Launcher l : {Launcher::automatic, Launcher::mpi, Launcher::env}) {
    if (name == launcher_name(l)) return l;
  }
  throw std::invalid_argument("launcher '" + name + "': expected one of auto, mpi, env");
}

std::optional<EnvLaunch> env_launch(const Getenv& getenv) {
  if (auto l = torchrun_launch(getenv)) return l;
  return slurm_launch(getenv);
}

std::optional<EnvLaunch> env_launch() { return env_launch(process_getenv); }

std::optional<MpiLaunch> mpi_launch(const Getenv& getenv) {
  for (const MpiLauncherVars& v : kMpiLaunchers) {
    if (!getenv(v.rank)) continue;
    // A variable this launcher does not set (nullptr) is not given, as one unset.
    const auto var = [&](const char* name, int low, int high) {
      return name ? int_var(getenv, name, low, high) : std::nullopt;
    };
    MpiLaunch l;
    l.source = v.source;
    l.size = var(v.size, 1, INT_MAX).value_or(-1);
    const int most = l.size > 0 ? l.size : INT_MAX;
    l.rank = *var(v.rank, 0, most - 1);
    l.local_size = var(v.local_size, 1, most).value_or(-1);
    l.local_rank = var(v.local_rank, 0, (l.local_size > 0 ? l.local_size : most) - 1).value_or(-1);
    return l;
  }
  return std::nullopt;
}

std::optional<MpiLaunch> mpi_launch() { return mpi_launch(process_getenv); }

Launcher resolve_launcher(Launcher asked, const Getenv& getenv) {
  const bool mpi_vars = mpi_launch(getenv).has_value();
  switch (asked) {
    case Launcher::mpi: return Launcher::mpi;
    case Launcher::env:
      RF_CHECK(env_launch(getenv).has_value(), "launch: --launcher env, but neither torchrun's "
               "variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) nor Slurm's "
               "(SLURM_PROCID, SLURM_NTASKS) are set");
      return Launcher::env;
    case Launcher::automatic: break;
  }
  if (mpi_vars) return Launcher::mpi;
  return env_launch(getenv) ? Launcher::env : Launcher::mpi;
}

Launcher resolve_launcher(Launcher asked) { return resolve_launcher(asked, process_getenv); }

TcpBootstrapOptions bootstrap_options(const EnvLaunch& launch, std::chrono::milliseconds timeout) {
  return {.master_addr = launch.master_addr, .master_port = launch.master_port,
          .rank = launch.rank, .size = launch.size, .timeout = timeout,
          .through_store = launch.agent_store, .store_prefix = launch.store_prefix};
}

}  // namespace ringflow::comm
