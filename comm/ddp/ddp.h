// DistributedDataParallel: data-parallel training of an nn::Module over a ProcessGroup. Each
// rank runs the model on its own share of the batch; backward averages the gradients over
// the ranks, bucketed and overlapped with the rest of backward (comm/ddp/reducer.h), so that
// after optimizer.step() every rank holds the same parameters.
//
//   auto ddp = DistributedDataParallel(model, pg);     // checks the model, broadcasts rank 0's
//   Tensor loss = cross_entropy(ddp(x), y);            // training forward: broadcasts buffers
//   loss.backward();                                   // averaged gradients in .grad
//   sgd.step(); sgd.zero_grad();                       // the next backward computes into
//                                                      // the buckets: no copy, no zeroing
//
// Construction is collective: every rank must construct it, in the same order relative to
// its other collectives. It verifies that every rank holds the same parameter and buffer
// names, shapes and dtypes (every rank throws the same std::invalid_argument naming the first
// difference and the ranks otherwise; nothing hangs), then broadcasts rank 0's parameters
// and buffers. A training forward (module in training mode, grad mode on) is collective
// too; a forward in eval mode or under NoGradGuard is the module's own and communicates
// nothing, so one rank alone may evaluate. It is not an nn::Module: the module keeps its
// own parameter names (no "module." prefix), so checkpoints load in a single process.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/ddp/reducer.h"
#include "ringflow/framework/nn/module.h"

namespace ringflow::comm {

struct DdpOptions {
  double bucket_cap_mb = 25;       // MiB (PyTorch's default); 0: one bucket per parameter
  double first_bucket_cap_mb = 1;  // PyTorch's too: starts communication early in backward
  // Both caps chosen from the first iterations' measurements (comm/ddp/bucket_tuner.h),
  // instead of the two above.
  bool tune_bucket_caps = false;
  BucketTunerOptions bucket_tuner;
  bool rebuild_buckets = true;     // re-bucket once, in the order gradients became ready
  bool find_unused_parameters = false;  // see ReducerOptions
  // Before each training forward, broadcast rank 0's buffers (BatchNorm's running
  // statistics), so that every rank normalises and evaluates alike.
  bool broadcast_buffers = true;
  Algorithm algorithm = Algorithm::automatic;  // the buckets' allreduce
  Timeout timeout = kDefaultTimeout;
  std::shared_ptr<CommHook> comm_hook;  // null: allreduce-average
};

// One iteration's communication: the buffer broadcast before forward and the buckets
// reduced in backward.
struct DdpStats {
  ReducerStats backward;
  // The buffers' broadcast before the last forward ("buffers"; bytes 0 and no times when
  // there was none). The training thread waits for it: all of it is exposed.
  CommEvent broadcast;

  Traffic traffic() const;
  double broadcast_ms() const { return broadcast.ms(); }
  double comm_ms() const { return backward.comm_ms + broadcast_ms(); }
  double exposed_ms() const { return backward.wait_ms + broadcast_ms(); }
  // 1 - exposed / total communication time: the share of communication hidden behind
  // backward's computation (0 without communication; clamped to [0, 1]).
  double overlap() const;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::ModulePtr module, std::shared_ptr<ProcessGroup> pg,
                          DdpOptions options = {});
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  nn::Module& module() const { return *module_; }
  const nn::ModulePtr& module_ptr() const { return module_; }
  ProcessGroup& process_group() const { return *pg_; }
  const DdpOptions& options() const { return options_; }

  // While the returned guard lives, training forwards do not synchronise their backward:
  // gradients accumulate locally in .grad (gradient accumulation over micro-batches; the
  // first forward after the guard synchronises the sum). Do not zero the gradients between.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.require_sync_) {
      ddp.require_sync_ = false;
    }
    ~NoSync() { ddp_->require_sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Between iterations only; null restores the default allreduce-average.
  void register_comm_hook(std::shared_ptr<CommHook> hook);

  // The last training iteration's communication (complete once its backward has ended).
  DdpStats stats() const;
  // What the bucket tuner tried and chose (tuning().done() once chosen); null without
  // tune_bucket_caps.
  const BucketTuning* bucket_tuning() const { return reducer_->bucket_tuning(); }
  // Parameter names per bucket, in launch order (after the rebuild: the ready order).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

 private:
  void verify_same_model();
  void broadcast_state();
  void broadcast_buffers();

  nn::ModulePtr module_;
  std::shared_ptr<ProcessGroup> pg_;
  DdpOptions options_;
  std::vector<std::string> names_;  // of the parameters the reducer synchronises
  std::shared_ptr<Reducer> reducer_;
  bool require_sync_ = true;
  CommEvent broadcast_;
};

// Verifies that every rank of `pg` passes the same list of entries (here: parameters' and
// buffers' "name dtype shape"); collective. Every rank throws the same
// std::invalid_argument, naming `what`, the first entry that differs and the ranks, when
// they do not. The exchanged words live on `device` (a group's tensors: NCCL's take no CPU
// tensor).
void verify_same_across_ranks(ProcessGroup& pg, const std::vector<std::string>& entries,
                              const std::string& what, Timeout timeout = kDefaultTimeout,
                              Device device = Device::cpu());

// Broadcasts `tensors` from `root` in place, packed into one flat buffer per dtype (one
// collective per dtype instead of one per tensor). Collective; returns the bytes moved, and
// adds the closed form of the broadcasts to *model when given.
Traffic broadcast_coalesced(ProcessGroup& pg, const std::vector<Tensor>& tensors, int root = 0,
                            Timeout timeout = kDefaultTimeout, Traffic* model = nullptr);

}  // namespace ringflow::comm
