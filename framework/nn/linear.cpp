#include "ringflow/framework/nn/linear.h"

#include "ringflow/framework/nn/init.h"
#include "ringflow/framework/ops.h"

namespace ringflow::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias, Generator* gen)
    : Module("Linear"), in_features_(in_features), out_features_(out_features) {
  RF_CHECK(in_features > 0 && out_features > 0, "Linear: features must be > 0, got in ",
           in_features, ", out ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (has_bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters(gen);
}

void Linear::reset_parameters(Generator* gen) { init::default_layer_init(weight, bias, gen); }

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }
Tensor Linear::forward_relu(const Tensor& x) { return linear_relu(x, weight, bias); }

}  // namespace ringflow::nn
