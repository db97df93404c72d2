// A parent for each rank that mpiexec starts, so that the other ranks live to say which one
// died: MPICH's Hydra SIGKILLs a node's ranks the moment one dies of a signal or exits
// without MPI_Finalize, Open MPI's mpirun kills them all the moment one dies or exits
// non-zero, and a parent that outlives its rank holds both back.
#pragma once

#include <chrono>

namespace ringflow::comm {

// The longest a supervisor outlives a failed rank while other ranks of its node still run:
// long enough for them to reach their next collective, notice and report.
constexpr std::chrono::milliseconds kSupervisorGrace{10000};
// How long a supervisor outlives a rank killed by a signal before it dies of the same
// signal, which is what makes Hydra end the job on every node (an exit code does not): the
// ranks of other nodes hear of the death through their liveness links well within it.
constexpr std::chrono::milliseconds kOtherNodesGrace{2000};

// Where Hydra (PMI_FD and PMI_RANK set) or Open MPI's mpirun (OMPI_COMM_WORLD_RANK set)
// started this process and only this thread runs (fork copies no other), forks and returns
// true in the child, which is the rank; else returns false and nothing changed.
//
// The parent, the supervisor, never returns. It holds the launcher's PMI socket open, passes
// the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) on to the rank while the rank runs
// (after that they end the supervisor, as when mpirun ends the job) and ignores Hydra's
// SIGUSR1; the rank dies with it, first saying so on stderr (a thread of the rank waits for
// its parent's death: Note [a killed supervisor]). Once the rank ended, it exits as the rank
// did: at once when it succeeded, else once no other rank of its node runs (within `grace`),
// and for a death by signal, where the job has ranks on other nodes, not before
// `other_nodes` passed since it.
bool supervise_rank(std::chrono::milliseconds grace = kSupervisorGrace,
                    std::chrono::milliseconds other_nodes = kOtherNodesGrace);

}  // namespace ringflow::comm
