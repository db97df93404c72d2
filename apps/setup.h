// What train sets up from its flags before the first step: the process group the launcher
// calls for (comm/group/launch_group.h) and the device, the data sets, the learning-rate
// schedule.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ringflow/apps/device_choice.h"
#include "ringflow/apps/gradient_sync.h"
#include "ringflow/apps/train_flags.h"
#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/framework/ringflow.h"

namespace ringflow::apps {

// Where a rank trains and which groups carry its collectives.
struct Setup {
  DeviceChoice device;
  std::string backend;                          // the gradients' group: "mpi" or "nccl"
  std::shared_ptr<comm::ProcessGroup> pg;       // MPI (the CPU-side statistics); null: --sync none
  std::shared_ptr<comm::ProcessGroup> grad_pg;  // the gradients': pg, or NCCL's over it
  std::string transport;                        // what our allreduce algorithms talk through
  comm::NodeRanks node;
  std::string how;                              // how the ranks were started (launch_group)
  // Each rank's "pid@host", for the log: launchers and tools (mpiexec's "BAD TERMINATION ...
  // PID N RUNNING AT host", ps, a core file) name processes, not ranks.
  std::vector<std::string> processes;
};

// Collective under a launcher (every rank calls it): the groups, the device. --sync none
// under a launcher of several ranks throws, naming the flag.
Setup set_up(const Flags& f, SyncMode mode, comm::Timeout comm_timeout);

// Refused before anything trains, rather than when it is first written: a folder where a
// file is to go, a file in a folder that does not exist or cannot be written. Makes and
// removes a probe file beside it (path + ".tmp"). Throws std::invalid_argument naming `flag`.
void check_writable(const char* flag, const std::string& path);

// --checkpoint, --checkpoint-dir, --metrics (rank 0) and --trace (every rank) can be written:
// throws naming the flag and the folder otherwise. Removes stale checkpoint temporary files
// with a log line each (checkpointing.h).
void check_output_paths(const Flags& f, int rank, int world);

struct Data {
  std::shared_ptr<const data::Dataset> train, test;
  std::vector<std::shared_ptr<const data::Transform>> train_transforms, test_transforms;
  std::vector<std::string> classes;  // the class folders' names (own images); empty: built-in sets
  std::string note;                  // for the log (own images: the classes, files ignored)
  bool split_by_rank = false;        // train is this rank's share already (shards): no sampler
};

// The --dataset's training and test sets with their transforms, for rank `rank` of `world`
// (shards are dealt to ranks); throws where the model takes images of another shape.
Data open_data(const Flags& f, const Shape& model_input, int rank = 0, int world = 1);

// The --optimizer over params, with --lr, --momentum (sgd) and --weight-decay.
std::unique_ptr<optim::Optimizer> make_optimizer(const Flags& f, std::vector<Tensor> params);

// "[rank N] " where a launcher started several ranks (its variables say which this is),
// else "": what begins each error line, known before any process group exists.
std::string rank_prefix();

// The --schedule (stepped per epoch), after --warmup-epochs of linear warm-up.
std::shared_ptr<const optim::LRSchedule> make_schedule(const Flags& f);

// The dtype of a precision flag's name: fp32, fp16 or bf16.
DType precision_dtype(const std::string& name);

// --algo's names ("rd": recursive doubling).
comm::Algorithm algorithm_from_flag(const std::string& name);

}  // namespace ringflow::apps
