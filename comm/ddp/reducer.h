// Reducer: the gradient synchronisation inside DistributedDataParallel (comm/ddp/ddp.h). It keeps
// every parameter's .grad as a view into a flat bucket buffer, where backward computes it,
// starts a bucket's reduction (a CommHook; the default allreduce-average) as soon as every
// gradient in it is ready during backward, strictly in bucket order, and waits for all of
// them when backward ends, leaving the averaged gradients in .grad without a copy. See
// Note [DDP reducer] in reducer.cpp.
//
// Threading: the reducer runs on the training thread (the autograd hooks and the end-of-
// backward callback run there); the reductions run on the process group's communication
// thread. One reducer per set of parameters; it is not copied or moved.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/comm/ddp/bucket_tuner.h"
#include "ringflow/comm/ddp/buckets.h"
#include "ringflow/comm/ddp/comm_hooks.h"
#include "ringflow/comm/group/comm_event.h"
#include "ringflow/comm/group/process_group.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::comm {

struct ReducerOptions {
  double bucket_cap_mb = 25;        // MiB per bucket at most (0: one bucket per parameter)
  double first_bucket_cap_mb = 1;   // the first bucket's cap (never above bucket_cap_mb)
  // Choose both caps from measurements instead (comm/ddp/bucket_tuner.h): the iterations
  // after the first try the tuner's candidates, then keep the fastest.
  bool tune_bucket_caps = false;
  BucketTunerOptions tuner;
  // At the end of the first synchronised backward, re-bucket in the order the gradients
  // became ready (rank 0's order, broadcast), as PyTorch's rebuild_buckets, and only then
  // reduce that backward's buckets (Note [DDP reducer], "Rebuilding").
  bool rebuild_buckets = true;
  // Walk the graph after each forward so that buckets holding parameters the output cannot
  // reach start without waiting for the end of backward. Without it such parameters still
  // never hang the job: the end of backward counts them as zero contributions.
  bool find_unused_parameters = false;
  Algorithm algorithm = Algorithm::automatic;  // for the buckets' allreduces
  Timeout timeout = kDefaultTimeout;
  std::shared_ptr<CommHook> comm_hook;  // null: AllreduceAverageHook
};

// The last backward's communication, as the reducer saw it.
struct ReducerStats {
  using Clock = std::chrono::steady_clock;
  bool synchronized = false;  // false under no_sync
  int buckets = 0;
  int64_t gradient_bytes = 0;  // payload of the buckets: this rank's gradients, each 16-byte aligned
  int unused_parameters = 0;   // got no gradient: reduced as zeros
  // Buckets complete before an earlier one, so launched only once it was (0 when the bucket
  // order is the order the gradients became ready in).
  int held_back = 0;
  Traffic traffic;             // bytes this rank sent and received for the buckets
  Traffic model;               // ... and what the closed forms say they move
  double comm_ms = 0;          // the communication thread's time on the buckets' collectives
  double wait_ms = 0;          // the training thread blocked at the end of backward (exposed)
  Clock::time_point backward_start;  // backward reached the module's output
  Clock::time_point wait_start;      // the end of backward began waiting for the buckets
  Clock::time_point backward_end;    // every bucket reduced
  std::vector<CommEvent> events;  // one per bucket ("bucket N"), in launch order
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // params: leaves that require grad, in registration order (names for messages), all on
  // one device. Registers a post-accumulate hook on each (they outlive the reducer harmlessly).
  // Gradients already present are copied into the buckets.
  static std::shared_ptr<Reducer> create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Arms the reducer for the backward pass through `output` (what the module's forward
  // returned) and returns it wrapped in an identity node whose backward starts the
  // iteration's bookkeeping. sync = false (no_sync): gradients accumulate in the buckets,
  // nothing is communicated. Call once per forward, on every rank alike.
  Tensor prepare_for_backward(const Tensor& output, bool sync);

  void set_comm_hook(std::shared_ptr<CommHook> hook);
  const ReducerStats& stats() const { return stats_; }
  // Parameter indices per bucket, in launch order.
  const std::vector<std::vector<size_t>>& bucket_assignment() const { return assignment_; }
  bool rebuilt() const { return rebuilt_; }
  // What the tuner tried and chose; null without tune_bucket_caps.
  const BucketTuning* bucket_tuning() const { return tuner_ ? &tuner_->tuning() : nullptr; }

 private:
  Reducer(std::vector<Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> pg, ReducerOptions options);

  struct Bucket {
    Tensor buffer;               // (elements) this bucket's gradients, flat, one dtype, each 16-byte aligned
    std::vector<size_t> params;  // parameter indices, in order within the buffer
    int pending = 0;             // gradients not yet ready in this backward
    BucketReduction reduction;   // in flight between launch and the end of backward
    CommEvent event;
  };

  void build_buckets(std::vector<std::vector<size_t>> assignment);
  void on_backward_start();
  void on_grad_ready(size_t param);
  void ensure_in_bucket(size_t param);
  void mark_ready(size_t param);
  void launch_ready_buckets();
  // Every bucket pending again, its event fresh; the stats' bucket count and bytes.
  void reset_buckets();
  void finalize();
  void rebuild();
  // Re-assigns the buckets for order_ and caps_ (a no-op when nothing changes).
  void rebucket();
  // Feeds one synchronised iteration's time to the tuner and takes its next caps.
  void tune(double ms);
  void queue_finalize();

  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions options_;
  std::vector<int64_t> caps_;  // bytes: {first bucket, later buckets}
  std::vector<size_t> order_;  // parameters in bucketing order
  std::unique_ptr<BucketTuner> tuner_;

  std::vector<std::vector<size_t>> assignment_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<Tensor> views_;      // per parameter: its slice of its bucket, its shape

  // Per backward.
  bool armed_ = false;            // prepare_for_backward ran; finalize has not yet
  bool sync_ = false;
  bool finalize_queued_ = false;
  bool deferring_ = false;  // the first synchronised backward: nothing launched before the rebuild
  std::vector<bool> ready_;       // per parameter
  size_t next_launch_ = 0;        // buckets before it are launched
  std::vector<size_t> unreachable_;  // find_unused_parameters: the output cannot reach them

  // The first backward's order of readiness, for the rebuild.
  bool recording_order_ = true;
  std::vector<size_t> ready_order_;
  bool rebuilt_ = false;

  ReducerStats stats_;
};

}  // namespace ringflow::comm
