#include "framework/nn/activation.h"

#include "framework/ops.h"

namespace ringflow::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

}  // namespace ringflow::nn
