// nn::BatchNorm2d as PyTorch's: parameters `weight` (1s) and `bias` (0s) when affine, buffers
// `running_mean` (0s), `running_var` (1s) and `num_batches_tracked` (i64 scalar) when
// track_running_stats. Training normalises with the batch statistics and updates the running
// ones with `momentum` (none: a cumulative average, 1 / num_batches_tracked); eval uses the
// running statistics.
#pragma once

#include <optional>

#include "ringflow/framework/nn/module.h"

namespace ringflow::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {});
  Tensor forward(const Tensor& x) override;  // x (N, C, H, W)
  // relu(forward(x) + residual) (residual may be undefined), as one op where the device
  // fuses it (ops.h's batch_norm_relu); relu false: forward(x).
  Tensor forward_relu(const Tensor& x, const Tensor& residual = {}, bool relu = true);
  void reset_running_stats();
  void reset_parameters();
  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }

  Tensor weight, bias;                                     // (C), undefined unless affine
  Tensor running_mean, running_var, num_batches_tracked;   // (C), (C), () i64

 private:
  int64_t num_features_;
  BatchNormOptions options_;
};

}  // namespace ringflow::nn
