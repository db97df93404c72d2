#include "ringflow/framework/nn/flatten.h"

#include "ringflow/framework/ops.h"

namespace ringflow::nn {

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim_, end_dim_); }

}  // namespace ringflow::nn
