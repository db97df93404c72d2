#include "ringflow/framework/nn/activation.h"

#include "ringflow/framework/ops.h"

namespace ringflow::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

}  // namespace ringflow::nn
