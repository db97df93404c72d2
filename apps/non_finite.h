// train's guard against numbers that are not finite (--on-nonfinite): a loss or gradients
// holding inf or NaN stop the run with a line naming the step (or skip that optimizer step,
// or pass), and a model that is not finite is neither written to a checkpoint nor loaded.
// fp16 keeps its grad scaler's own skipping of steps whose gradients overflowed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/framework/serialize.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::apps {

enum class OnNonFinite { stop, skip, ignore };

// What stops a run under OnNonFinite::stop.
struct NonFiniteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whether every element of t is finite (any dtype; integers always are).
bool all_finite(const Tensor& t);

// The name of the first tensor holding an inf or a NaN, or "" when all are finite.
std::string first_non_finite(const NamedTensors& tensors);

class NonFiniteGuard {
 public:
  static constexpr int64_t kMaxSkipsInARow = 10;

  // check_grads_every: optimizer steps between looks at the gradients (0: never; under skip
  // every step, since the decision needs them). scaler_checks_grads: fp16, whose scaler
  // already skips the steps with non-finite gradients.
  NonFiniteGuard(OnNonFinite policy, int64_t check_grads_every, bool scaler_checks_grads);

  // Before the optimizer step of `iteration` (counted over the run), with the step's mean
  // loss on this rank and the gradients it would apply (after their averaging, so that every
  // rank of a synchronised run decides alike). Returns whether the step goes ahead; throws
  // NonFiniteError naming the iteration under stop, and under skip when the parameters
  // themselves are no longer finite or kMaxSkipsInARow steps in a row were skipped (nothing
  // is being trained any more).
  bool allow_step(double loss, const std::vector<Tensor>& params, int64_t iteration);

  // Before a checkpoint is written: throws under stop and skip when the model is not finite;
  // under ignore returns false (the checkpoint is left out) with a line on stderr.
  bool may_save(const NamedTensors& state, int64_t iteration) const;

 private:
  void check_can_skip(const std::vector<Tensor>& params, int64_t iteration);

  OnNonFinite policy_;
  int64_t check_grads_every_;
  bool scaler_checks_grads_;
  int64_t skips_in_a_row_ = 0;
};

}  // namespace ringflow::apps
