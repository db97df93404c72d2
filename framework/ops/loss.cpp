// Losses composed from differentiable ops, so their gradients need no rules of their own.
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

void check_targets(const Tensor& input, const Tensor& target, const char* op) {
  RF_CHECK(input.dim() == 2, op, ": input must be (N, C), got ", shape_str(input.shape()));
  RF_CHECK(target.dtype() == DType::i64, op, ": target must be i64 class indices, got ",
           dtype_name(target.dtype()));
  RF_CHECK(target.dim() == 1 && target.size(0) == input.size(0), op, ": target of shape ",
           shape_str(target.shape()), " for input of shape ", shape_str(input.shape()),
           " (expected (", input.size(0), ",))");
  if (target.device().is_cpu()) {
    const std::vector<int64_t> t = target.to_vector<int64_t>();
    for (size_t i = 0; i < t.size(); ++i)
      RF_CHECK(t[i] >= 0 && t[i] < input.size(1), op, ": target[", i, "] = ", t[i],
               " is out of range for ", input.size(1), " classes");
  }
}

Tensor reduce(const Tensor& per_sample, Reduction reduction) {
  switch (reduction) {
    case Reduction::mean: return mean(per_sample);
    case Reduction::sum: return sum(per_sample);
    case Reduction::none: return per_sample;
  }
  return per_sample;
}

// -log_probs[i, target[i]] per sample.
Tensor picked_nll(const Tensor& log_probs, const Tensor& target) {
  return neg(gather(log_probs, 1, target.unsqueeze(1)).squeeze(1));
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction) {
  check_targets(log_probs, target, "nll_loss");
  return reduce(picked_nll(log_probs, target), reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction,
                     double label_smoothing) {
  check_targets(logits, target, "cross_entropy");
  RF_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  Tensor logp = log_softmax(logits, 1);
  Tensor loss = picked_nll(logp, target);
  if (label_smoothing > 0.0) {
    // PyTorch: (1 - e) * nll + e * mean over classes of -log p.
    Tensor smooth = neg(mean(logp, {1}));
    loss = loss * (1.0 - label_smoothing) + smooth * label_smoothing;
  }
  return reduce(loss, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  RF_CHECK(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()),
           " and target ", shape_str(target.shape()), " differ in shape");
  Tensor d = sub(input, target);
  return reduce(mul(d, d), reduction);
}

}  // namespace ringflow
