#include "ringflow/framework/nn/pooling.h"

namespace ringflow::nn {

namespace {

Pool2dParams to_params(const Pool2dOptions& o) {
  return pool2d_params(o.kernel_size, o.stride, o.padding, o.ceil_mode, o.count_include_pad);
}

Pool2dOptions square(int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode,
                     bool count_include_pad) {
  Pool2dOptions o;
  o.kernel_size = {kernel, kernel};
  if (stride > 0) o.stride = std::array<int64_t, 2>{stride, stride};
  o.padding = {padding, padding};
  o.ceil_mode = ceil_mode;
  o.count_include_pad = count_include_pad;
  return o;
}

}  // namespace

MaxPool2d::MaxPool2d(const Pool2dOptions& options)
    : Module("MaxPool2d"), params_(to_params(options)) {}
MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode)
    : MaxPool2d(square(kernel_size, stride, padding, ceil_mode, true)) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, params_); }

AvgPool2d::AvgPool2d(const Pool2dOptions& options)
    : Module("AvgPool2d"), params_(to_params(options)) {}
AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode,
                     bool count_include_pad)
    : AvgPool2d(square(kernel_size, stride, padding, ceil_mode, count_include_pad)) {}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, params_); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::array<int64_t, 2> output_size)
    : Module("AdaptiveAvgPool2d"), output_size_(output_size) {
  RF_CHECK(output_size[0] > 0 && output_size[1] > 0,
           "AdaptiveAvgPool2d: output size must be > 0, got ", output_size[0], "x",
           output_size[1]);
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size_); }

}  // namespace ringflow::nn
