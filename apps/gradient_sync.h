// The gradient synchronisation strategies of apps/train's --sync flag, behind one interface
// so that the training loop is the same for all of them (issue 5, section 1):
//   none            one process: nothing to synchronise
//   gather-scatter  after backward, every gradient averaged on its own by the naive
//                   algorithm (to rank 0 and back): the baseline. Over a group that runs
//                   none of our algorithms (NCCL): its reduce to rank 0, then its
//                   broadcast back
//   allreduce       after backward, every gradient allreduced on its own (--algo)
//   ddp             DistributedDataParallel: bucketed, overlapped with backward
//   fedavg          federated averaging: no gradient is exchanged; every --local-steps
//                   optimizer steps (and at each epoch's end), or every --local-epochs
//                   epochs, the models are averaged weighted by samples (comm/ddp/model_average.h)
// Each reports the step's communication (bytes, time on the communication thread, time the
// training thread waited for it), split so that the app can tell compute from waiting, and
// when each collective and each wait happened (for --trace, apps/trace.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/ddp/ddp.h"
#include "ringflow/comm/ddp/model_average.h"
#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/optim/optimizer.h"

namespace ringflow::apps {

enum class SyncMode { none, gather_scatter, allreduce, ddp, fedavg };
SyncMode sync_mode_from_name(const std::string& name);  // the --sync names
const char* sync_mode_name(SyncMode mode);

struct SyncOptions {
  SyncMode mode = SyncMode::none;
  comm::Algorithm algorithm = comm::Algorithm::automatic;  // allreduce and ddp's buckets
  double bucket_cap_mb = 25;
  bool tune_bucket_caps = false;  // ddp: the caps from measurements instead
  // ddp: "allreduce", "fp16" or "noop" (comm_hooks.h); allreduce: "noop" skips it.
  std::string comm_hook = "allreduce";
  bool find_unused_parameters = false;
  comm::Timeout timeout = comm::kDefaultTimeout;
  // gather-scatter as the group's reduce to rank 0 and broadcast back (one event per
  // gradient) rather than our naive allreduce; always so over NCCL.
  bool gather_scatter_by_collectives = false;
  // fedavg: a round every local_steps optimizer steps and at each epoch's end, or (when
  // local_steps is 0) at the end of every local_epochs-th epoch and of the last.
  int64_t local_steps = 0;
  int local_epochs = 1;
  comm::AverageTopology topology = comm::AverageTopology::cloud;
  DType wire = DType::f32;  // what fedavg's models travel as
};

using comm::CommEvent;  // one collective of a step (comm/group/comm_event.h)

// A stretch of time the training thread spent waiting for communication.
struct CommWait {
  using Clock = std::chrono::steady_clock;
  const char* what = "";  // "buffer broadcast", "end of backward", "after backward"
  Clock::time_point begin, end;
};

// One optimizer step's communication, summed over its micro-batches.
struct StepComm {
  comm::Traffic traffic;
  comm::Traffic model;           // the closed form of what traffic counted
  int rounds = 0;                // fedavg's model averages
  double comm_ms = 0;            // the communication thread's time on the step's collectives
  double forward_wait_ms = 0;    // inside forward (ddp's buffer broadcast)
  double backward_wait_ms = 0;   // inside backward (ddp's end-of-backward wait)
  double after_wait_ms = 0;      // after backward (gather-scatter, allreduce)
  double exposed_ms() const { return forward_wait_ms + backward_wait_ms + after_wait_ms; }
  std::vector<CommEvent> events;  // in issue order
  std::vector<CommWait> waits;    // in time order; their lengths sum to exposed_ms()

  StepComm& operator+=(const StepComm& o);
};

class GradientSync {
 public:
  // pg: null for SyncMode::none. Collective for the others: broadcasts rank 0's parameters
  // and buffers (ddp also checks that every rank holds the same model).
  GradientSync(nn::ModulePtr model, std::shared_ptr<comm::ProcessGroup> pg, SyncOptions options);

  // The training forward of one micro-batch; `last`: the last one before the optimizer step
  // (the others accumulate their gradients locally: ddp's no_sync).
  Tensor forward(const Tensor& x, bool last);
  // After that micro-batch's backward: gather-scatter and allreduce average every gradient
  // when `last`.
  void after_backward(bool last);
  // After the optimizer step: drops the gradients (ddp computes the next ones into its
  // buckets).
  void zero_grad(optim::Optimizer& optimizer);
  // After the optimizer step, with the samples the step trained on: fedavg averages the
  // models when a round is due. True when it communicated (take() has it).
  bool after_step(int64_t samples);
  // At the end of `epoch` (`last`: of the run): fedavg closes the round when one is due.
  bool end_of_epoch(int64_t epoch, bool last);
  // The communication since the last call, and starts counting afresh.
  StepComm take();

  const SyncOptions& options() const { return options_; }
  // ddp with tune_bucket_caps: what was tried and chosen; null otherwise.
  const comm::BucketTuning* bucket_tuning() const { return ddp_ ? ddp_->bucket_tuning() : nullptr; }

 private:
  void record_ddp_backward();
  void average_each_gradient();
  void average_models();

  nn::ModulePtr model_;
  std::shared_ptr<comm::ProcessGroup> pg_;
  SyncOptions options_;
  std::unique_ptr<comm::DistributedDataParallel> ddp_;
  std::vector<std::string> names_;  // of the parameters, in model_->parameters() order
  StepComm step_;
  int64_t round_steps_ = 0;       // fedavg: optimizer steps since the last average
  double round_samples_ = 0;      // ... and the samples they trained on
};

}  // namespace ringflow::apps
