// Communication hooks: how the DDP reducer (comm/ddp/reducer.h) turns one bucket of local
// gradients into the average over every rank. A hook starts the reduction when the bucket is
// ready (on the training thread, during backward) and returns what to wait for; the reducer
// waits at the end of backward, in bucket order, and then finds the average in the bucket.
//   AllreduceAverageHook   the default: one allreduce (ReduceOp::avg) of the bucket in place;
//   Fp16CompressionHook    PyTorch's fp16_compress_hook: divide by the world size, round to
//                          f16, allreduce-sum the f16 copy (half the bytes), write it back
//                          into the f32 bucket. Gradients come back rounded to f16 precision
//                          (about 3 significant decimal digits), and values beyond f16's
//                          range (65504 after the division) overflow to inf.
//   NoopHook               PyTorch's noop_hook, for measurements only: the same bucketing and
//                          bookkeeping, no communication; each rank keeps its own gradients
//                          (zero bytes), so the ranks' models drift apart. "ddp with
//                          communication skipped", the reference for DDP's overhead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ringflow/comm/group/process_group.h"

namespace ringflow::comm {

// A bucket's reduction in flight.
struct BucketReduction {
  std::shared_ptr<Work> work;   // the collective on the group's communication thread
  std::function<void()> then;   // runs on the waiting thread after work completes (or null)
  Traffic model;                // what the closed forms say the collective moves

  // Waits for the collective, then runs `then` (once).
  void wait();
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // bucket: (numel) contiguous, this rank's gradients of the bucket's parameters (each 16-byte
  // aligned: zeros between them, which any reduction keeps zero). Must leave
  // the average over every rank in `bucket` once the returned reduction's wait() returns.
  // options carries the algorithm and timeout DDP was given; op is the hook's business.
  virtual BucketReduction launch(ProcessGroup& pg, const Tensor& bucket,
                                 const CollectiveOptions& options) = 0;
};

class AllreduceAverageHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  BucketReduction launch(ProcessGroup& pg, const Tensor& bucket,
                         const CollectiveOptions& options) override;
};

class Fp16CompressionHook final : public CommHook {
 public:
  std::string name() const override { return "fp16"; }
  BucketReduction launch(ProcessGroup& pg, const Tensor& bucket,
                         const CollectiveOptions& options) override;
};

class NoopHook final : public CommHook {
 public:
  std::string name() const override { return "noop"; }
  BucketReduction launch(ProcessGroup& pg, const Tensor& bucket,
                         const CollectiveOptions& options) override;
};

// The hooks above, by kind (DdpOptions::comm_hook takes any CommHook).
enum class CommHookKind : uint8_t { allreduce, fp16, noop };
const char* comm_hook_name(CommHookKind kind);  // "allreduce", "fp16", "noop"
std::shared_ptr<CommHook> make_comm_hook(CommHookKind kind);

}  // namespace ringflow::comm
