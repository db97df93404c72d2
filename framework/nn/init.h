// Parameter initialisation as torch.nn.init does it, drawing from a ringflow Generator (the
// default one when null). Each fills `t` in place (under NoGradGuard) and returns it.
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (PyTorch's
// _calculate_fan_in_and_fan_out); gain as torch.nn.init.calculate_gain.
#pragma once

#include <string>

#include "ringflow/framework/random.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::nn::init {

enum class FanMode { fan_in, fan_out };

struct Fans {
  int64_t fan_in = 0, fan_out = 0;
};
Fans calculate_fans(const Tensor& t);  // needs >= 2 dims
// nonlinearity: "linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu" (param = slope).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
// normal(mean, std) redrawn until inside [a, b] (absolute bounds, as PyTorch's).
Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b,
                      Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// U(-bound, bound), bound = gain * sqrt(3 / fan).
Tensor& kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::fan_in,
                         const std::string& nonlinearity = "leaky_relu",
                         Generator* gen = nullptr);
// N(0, gain / sqrt(fan)).
Tensor& kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::fan_in,
                        const std::string& nonlinearity = "leaky_relu",
                        Generator* gen = nullptr);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

// While alive on this thread, every function above leaves its tensor as it is (the values of
// `empty`): for building a model only to load a checkpoint into it or to inspect its
// structure (PyTorch's skip_init / meta device), as ImageNet VGG's 138M draws take seconds.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool previous_;
};
bool init_enabled();

// The default of nn.Conv2d and nn.Linear (reset_parameters): weight kaiming_uniform_(a =
// sqrt(5)), i.e. U(+-1/sqrt(fan_in)), and bias U(+-1/sqrt(fan_in)) (bias may be undefined).
void default_layer_init(Tensor& weight, Tensor& bias, Generator* gen = nullptr);

}  // namespace ringflow::nn::init
