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

Tensor BatchNorm2d::forward(const Tensor& x) { return forward_relu(x, Tensor(), /*relu=*/false); }

Tensor BatchNorm2d::forward_relu(const Tensor& x, const Tensor& residual, bool relu) {
  RF_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D input (N, C, H, W), got ",
           shape_str(x.shape()));
  RF_CHECK(x.size(1) == num_features_, "BatchNorm2d(", num_features_, "): input ",
           shape_str(x.shape()), " has ", x.size(1), " channels");
  // Running statistics are used in eval and updated in training only when tracked; the
  // count of batches is kept on the device (momentum < 0: none given, a cumulative average).
  const bool batch_stats = is_training() || !options_.track_running_stats;
  const bool count = is_training() && options_.track_running_stats;
  const double momentum = options_.momentum.value_or(-1.0);
  const Tensor nbt = count ? num_batches_tracked : Tensor();
  if (!relu)
    return batch_norm(x, running_mean, running_var, weight, bias, batch_stats, momentum, options_.eps, nbt);
  return batch_norm_relu(x, running_mean, running_var, weight, bias, batch_stats, momentum, options_.eps,
                         residual, nbt);
}

}  // namespace ringflow::nn
