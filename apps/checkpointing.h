// train's checkpoints as a run sees them: when they are written (--checkpoint FILE and
// --checkpoint-dir DIR after every epoch, and every --checkpoint-every iterations), what a
// run resumes (--resume FILE, or auto: DIR's newest, else a fresh start), and the run's
// state beyond model and optimizer that they carry, so that a run resumed in the middle of
// an epoch continues bit for bit: the loss scaler, each rank's sums of the epoch under way
// and its loss since the last logged iteration, and the metrics file's length.
//
// Collective under a launcher: every rank calls resume() and save() at the same points.
// Rank 0 decides what to resume and writes; every rank reads the file it names.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ringflow/apps/checkpoint_dir.h"
#include "ringflow/apps/report.h"
#include "ringflow/apps/train_flags.h"
#include "ringflow/framework/ringflow.h"

namespace ringflow::apps {

// One rank's part of the epoch under way when a checkpoint was written in the middle of it:
// the sums that the epoch's record adds up (timings aside), and the loss since its last
// logged iteration.
struct EpochProgress {
  EpochStats stats;  // loss_sum, correct, seen, batches, skipped, traffic
  double window_loss = 0;
  int64_t window = 0;
};

struct Resumed {
  std::string path;
  TrainingPosition position;
  EpochProgress progress;  // this rank's; empty at an epoch's end
};

// Throws std::invalid_argument naming the flags where the checkpoint flags do not go together
// (--checkpoint-every or --resume auto with nowhere to write, --checkpoint-every under
// --sync fedavg, whose ranks hold different models between rounds).
void check_checkpoint_flags(const Flags& f);

// Rank 0, before the first step: the places of --checkpoint and --checkpoint-dir checked
// (checkpoint_dir.h), stale temporary files removed with a log line each.
void prepare_checkpoint_places(const Flags& f);

class Checkpointer {
 public:
  // `info`: what a resumed run must match (model, data set).
  Checkpointer(const Flags& f, comm::ProcessGroup* pg, comm::Timeout timeout,
               std::map<std::string, std::string> info);

  // --resume: loads model, optimizer and scaler (null: none) and checks that the run can go
  // on from it with `epoch_iterations` steps an epoch. Nothing for a fresh start. Throws,
  // the same on every rank, naming the file and what does not fit.
  std::optional<Resumed> resume(nn::Module& model, optim::Optimizer& optimizer,
                                optim::GradScaler* scaler, int64_t epoch_iterations);

  // Whether `p`, inside an epoch of `epoch_iterations`, is a --checkpoint-every point (the
  // epoch's last iteration is not: the epoch's own checkpoint follows it).
  bool due_in_epoch(const TrainingPosition& p, int64_t epoch_iterations) const;

  // Whether the run writes checkpoints at all (--checkpoint or --checkpoint-dir).
  bool wanted() const { return !f_.checkpoint.empty() || dir_.has_value(); }

  // Writes a checkpoint at `p` where any is asked for: rank 0 writes, every rank hands in its
  // `progress` (in the middle of an epoch; gathered to rank 0). Returns whether one was written
  // (rank 0; false elsewhere).
  bool save(const TrainingPosition& p, const nn::Module& model, const optim::Optimizer& optimizer,
            const optim::GradScaler* scaler, const EpochProgress& progress,
            int64_t epoch_iterations);

 private:
  std::string resume_target() const;
  void check_no_newer(int64_t iteration) const;
  std::map<std::string, std::string> run_state(const TrainingPosition& p,
                                               const optim::GradScaler* scaler,
                                               const EpochProgress& progress,
                                               int64_t epoch_iterations) const;
  void restore_run_state(Resumed& r, const Checkpoint& c, optim::GradScaler* scaler,
                         int64_t epoch_iterations) const;
  void trim_metrics(const Checkpoint& c, const std::string& path) const;

  const Flags f_;
  comm::ProcessGroup* const pg_;
  const comm::Timeout timeout_;
  const std::map<std::string, std::string> info_;
  const int rank_, world_;
  std::optional<CheckpointDir> dir_;
};

}  // namespace ringflow::apps
