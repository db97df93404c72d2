// Pooling layers: MaxPool2d, AvgPool2d (stride defaults to the kernel size, as in PyTorch)
// and AdaptiveAvgPool2d. They hold no parameters.
#pragma once

#include <array>
#include <optional>

#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/ops.h"

namespace ringflow::nn {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size = {2, 2};
  std::optional<std::array<int64_t, 2>> stride;  // none: the kernel size
  std::array<int64_t, 2> padding = {0, 0};
  bool ceil_mode = false;
  bool count_include_pad = true;  // AvgPool2d only
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& options);
  // Square kernel; stride 0 means the kernel size.
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;

 private:
  Pool2dParams params_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const Pool2dOptions& options);
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;

 private:
  Pool2dParams params_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::array<int64_t, 2> output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d({output_size, output_size}) {}
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C, oh, ow)

 private:
  std::array<int64_t, 2> output_size_;
};

}  // namespace ringflow::nn
