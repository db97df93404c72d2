// nn::Conv2d: 2-D convolution with PyTorch's parameters (`weight` (out, in, kh, kw), `bias`
// (out) unless bias = false) and default initialisation (init::default_layer_init).
#pragma once

#include <array>

#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/ops.h"

namespace ringflow::nn {

struct Conv2dOptions {
  int64_t in_channels = 0, out_channels = 0;
  std::array<int64_t, 2> kernel_size = {3, 3};
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  bool bias = true;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options, Generator* gen = nullptr);
  // Square kernel, stride and padding.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;  // x (N, in, H, W) -> (N, out, P, Q)
  void reset_parameters(Generator* gen = nullptr);
  const Conv2dOptions& options() const { return options_; }

  Tensor weight, bias;  // bias undefined when options.bias is false

 private:
  Conv2dOptions options_;
  Conv2dParams params_;
};

}  // namespace ringflow::nn
