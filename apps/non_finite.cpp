#include "ringflow/apps/non_finite.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "ringflow/framework/ringflow.h"

namespace ringflow::apps {

// 0 * x is 0 for every finite x and NaN for inf and NaN, so the sum is 0 exactly when every
// element is finite, in the tensor's own dtype and on its own device.
bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype()) || t.numel() == 0) return true;
  NoGradGuard no_grad;
  return sum(mul(t, 0.0)).item() == 0;
}

std::string first_non_finite(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors)
    if (t.defined() && !all_finite(t)) return name;
  return "";
}

NonFiniteGuard::NonFiniteGuard(OnNonFinite policy, int64_t check_grads_every, bool scaler_checks_grads)
    : policy_(policy),
      check_grads_every_(policy == OnNonFinite::skip ? 1 : check_grads_every),
      scaler_checks_grads_(scaler_checks_grads) {}

bool NonFiniteGuard::allow_step(double loss, const std::vector<Tensor>& params, int64_t iteration) {
  if (policy_ == OnNonFinite::ignore) return true;
  if (!std::isfinite(loss) && policy_ == OnNonFinite::stop) {
    throw NonFiniteError(fmt::format(
        "the loss is {} at iteration {}: training diverged (a lower --lr, --clip-grad-norm) or "
        "the data holds non-finite values; --on-nonfinite skip skips such steps", loss, iteration));
  }
  const bool look = !scaler_checks_grads_ && check_grads_every_ > 0 && iteration % check_grads_every_ == 0;
  if (!look) return true;
  const double norm = optim::grad_norm(params);
  if (std::isfinite(norm)) {
    skips_in_a_row_ = 0;
    return true;
  }
  if (policy_ == OnNonFinite::skip) {
    check_can_skip(params, iteration);
    return false;
  }
  throw NonFiniteError(fmt::format(
      "the gradients' norm is {} at iteration {}: training diverged (a lower --lr, "
      "--clip-grad-norm); --on-nonfinite skip skips such steps", norm, iteration));
}

// Skipping helps past a bad batch, not a model that is gone.
void NonFiniteGuard::check_can_skip(const std::vector<Tensor>& params, int64_t iteration) {
  if (!std::all_of(params.begin(), params.end(), [](const Tensor& p) { return all_finite(p); })) {
    throw NonFiniteError(fmt::format(
        "the model's parameters hold inf or NaN at iteration {}: skipping steps cannot bring them "
        "back (a lower --lr, --clip-grad-norm)", iteration));
  }
  if (++skips_in_a_row_ >= kMaxSkipsInARow) {
    throw NonFiniteError(fmt::format(
        "{} optimizer steps in a row skipped up to iteration {} (inf or NaN gradients): nothing "
        "is being trained (a lower --lr, --clip-grad-norm)", skips_in_a_row_, iteration));
  }
}

bool NonFiniteGuard::may_save(const NamedTensors& state, int64_t iteration) const {
  const std::string bad = first_non_finite(state);
  if (bad.empty()) return true;
  const std::string what = fmt::format("the model's '{}' holds inf or NaN at iteration {}", bad, iteration);
  if (policy_ != OnNonFinite::ignore)
    throw NonFiniteError(what + ": no checkpoint is written of a model that is not finite");
  fmt::print(stderr, "train: warning: {}: the checkpoint is left out\n", what);
  return false;
}

}  // namespace ringflow::apps
