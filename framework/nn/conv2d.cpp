#include "ringflow/framework/nn/conv2d.h"

#include "ringflow/framework/nn/init.h"

namespace ringflow::nn {

Conv2d::Conv2d(const Conv2dOptions& o, Generator* gen) : Module("Conv2d"), options_(o) {
  RF_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel_size[0] > 0 &&
               o.kernel_size[1] > 0,
           "Conv2d: channels and kernel size must be > 0, got in ", o.in_channels, ", out ",
           o.out_channels, ", kernel ", o.kernel_size[0], "x", o.kernel_size[1]);
  params_ = conv2d_params(o.stride, o.padding, o.dilation);
  weight = register_parameter(
      "weight", empty({o.out_channels, o.in_channels, o.kernel_size[0], o.kernel_size[1]}));
  if (o.bias) bias = register_parameter("bias", empty({o.out_channels}));
  reset_parameters(gen);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, bool bias, Generator* gen)
    : Conv2d(Conv2dOptions{in_channels, out_channels, {kernel_size, kernel_size},
                           {stride, stride}, {padding, padding}, {1, 1}, bias},
             gen) {}

void Conv2d::reset_parameters(Generator* gen) { init::default_layer_init(weight, bias, gen); }

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, params_); }

}  // namespace ringflow::nn
