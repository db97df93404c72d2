#include "ringflow/comm/ddp/comm_hooks.h"

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::comm {

void BucketReduction::wait() {
  work->wait();
  if (then) {
    auto fn = std::move(then);
    then = nullptr;
    fn();
  }
}

BucketReduction AllreduceAverageHook::launch(ProcessGroup& pg, const Tensor& bucket,
                                             const CollectiveOptions& options) {
  CollectiveOptions o = options;
  o.op = ReduceOp::avg;
  return {pg.allreduce(bucket, o), nullptr,
          pg.allreduce_traffic_model(bucket.numel(), bucket.dtype(), o.algorithm)};
}

BucketReduction Fp16CompressionHook::launch(ProcessGroup& pg, const Tensor& bucket,
                                            const CollectiveOptions& options) {
  if (bucket.dtype() != DType::f32 && bucket.dtype() != DType::f64) {
    return AllreduceAverageHook().launch(pg, bucket, options);  // already 16-bit (or integer)
  }
  NoGradGuard no_grad;
  // Divide before rounding, as PyTorch's hook does: the sum of n f16 values overflows
  // sooner than their average.
  Tensor half = mul(bucket, 1.0 / pg.size()).to(DType::f16);
  CollectiveOptions o = options;
  o.op = ReduceOp::sum;
  std::shared_ptr<Work> work = pg.allreduce(half, o);
  return {std::move(work),
          [out = Tensor(bucket), half]() mutable {
            NoGradGuard no_grad;
            out.copy_(half);  // f16 -> the bucket's dtype
          },
          pg.allreduce_traffic_model(half.numel(), DType::f16, o.algorithm)};
}

BucketReduction NoopHook::launch(ProcessGroup&, const Tensor& bucket, const CollectiveOptions&) {
  // A Work already done: the reducer waits on it and reads its (zero) traffic and its
  // (zero-length) run time as for any other bucket.
  auto work = std::make_shared<Work>("noop hook (" + std::to_string(bucket.numel()) +
                                     " elements, not sent)");
  work->finish();  // its start and end time: now
  return {std::move(work), nullptr, {}};
}

const char* comm_hook_name(CommHookKind kind) {
  switch (kind) {
    case CommHookKind::allreduce: return "allreduce";
    case CommHookKind::fp16: return "fp16";
    case CommHookKind::noop: return "noop";
  }
  return "?";
}

std::shared_ptr<CommHook> make_comm_hook(CommHookKind kind) {
  switch (kind) {
    case CommHookKind::allreduce: return std::make_shared<AllreduceAverageHook>();
    case CommHookKind::fp16: return std::make_shared<Fp16CompressionHook>();
    case CommHookKind::noop: return std::make_shared<NoopHook>();
  }
  throw std::invalid_argument("make_comm_hook: no such kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace ringflow::comm
