// Gradient clipping by global norm: torch.nn.utils.clip_grad_norm_.
#pragma once

#include <vector>

#include "ringflow/framework/tensor.h"

namespace ringflow::optim {

// The norm of order norm_type (2 by default; INFINITY for the largest |g|) of all the
// parameters' gradients taken together (parameters without .grad are skipped). When it
// exceeds max_norm, every gradient is scaled in place by max_norm / (norm + 1e-6), as in
// PyTorch. Returns the norm before clipping (0 when no parameter has a gradient).
// Accumulates in f64 whatever the gradients' dtype.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// That norm alone, nothing clipped (torch.nn.utils.get_total_norm of the gradients): inf or
// NaN when a gradient holds one.
double grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);

}  // namespace ringflow::optim
