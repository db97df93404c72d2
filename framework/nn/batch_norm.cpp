#include "ringflow/framework/nn/batch_norm.h"

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/nn/init.h"
#include "ringflow/framework/ops.h"

namespace ringflow::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, const BatchNormOptions& options)
    : Module("BatchNorm2d"), num_features_(num_features), options_(options) {
  RF_CHECK(num_features > 0, "BatchNorm2d: num_features must be > 0, got ", num_features);
  if (options.affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
  }
}

void BatchNorm2d::reset_running_stats() {
  if (!options_.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNorm2d::reset_parameters() {
  reset_running_stats();
  if (options_.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  RF_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D input (N, C, H, W), got ",
           shape_str(x.shape()));
  RF_CHECK(x.size(1) == num_features_, "BatchNorm2d(", num_features_, "): input ",
           shape_str(x.shape()), " has ", x.size(1), " channels");
  double factor = options_.momentum.value_or(0.0);
  if (is_training() && options_.track_running_stats) {
    {
      NoGradGuard no_grad;
      // i64 scalar += 1 (on any device): through a host value to stay dtype-exact.
      num_batches_tracked.fill_(num_batches_tracked.item() + 1);
    }
    if (!options_.momentum) factor = 1.0 / num_batches_tracked.item();
  }
  // Running statistics are used in eval and updated in training only when tracked.
  const bool batch_stats = is_training() || !options_.track_running_stats;
  return batch_norm(x, running_mean, running_var, weight, bias, batch_stats, factor,
                    options_.eps);
}

}  // namespace ringflow::nn
