#include "ringflow/framework/nn/dropout.h"

#include "ringflow/framework/ops.h"

namespace ringflow::nn {

Dropout::Dropout(double p, Generator* gen) : Module("Dropout"), p_(p), gen_(gen) {
  RF_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), gen_); }

}  // namespace ringflow::nn
