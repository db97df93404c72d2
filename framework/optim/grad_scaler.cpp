#include "ringflow/framework/optim/grad_scaler.h"

#include <cmath>
#include <stdexcept>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/error.h"
#include "ringflow/framework/ops.h"

namespace ringflow::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  RF_CHECK(options_.init_scale > 0 && std::isfinite(options_.init_scale),
           "GradScaler: init_scale must be positive and finite, got ", options_.init_scale);
  RF_CHECK(options_.growth_factor > 1, "GradScaler: growth_factor must exceed 1, got ",
           options_.growth_factor);
  RF_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1,
           "GradScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor);
  RF_CHECK(options_.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
           options_.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return mul(loss, scale_); }

void GradScaler::unscale_(Optimizer& optimizer) {
  RF_CHECK(!unscaled_, "GradScaler: unscale_ called twice before update()");
  unscaled_ = true;
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  // A sum is finite exactly when every term is (the gradients are far below f32's range):
  // one sum over every gradient, read once (on a GPU, one synchronisation per step).
  Tensor total;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.copy_(mul(g, inv));  // in place: ddp's gradients are views of its buckets
    const Tensor s = sum(g.to(DType::f32));
    total = total.defined() ? add(total, s.to(total.device())) : s;
  }
  if (total.defined() && !std::isfinite(total.item())) found_inf_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  RF_CHECK(unscaled_, "GradScaler: update() without a step since the last one");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"skipped_steps", static_cast<double>(skipped_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  auto get = [&](const char* key) {
    const auto it = state.find(key);
    if (it == state.end())
      throw std::invalid_argument(std::string("GradScaler state: '") + key + "' is missing");
    if (!std::isfinite(it->second) || it->second < 0)
      throw std::invalid_argument(std::string("GradScaler state: '") + key + "' is " +
                                  std::to_string(it->second));
    return it->second;
  };
  const double scale = get("scale");
  RF_CHECK(scale > 0, "GradScaler state: 'scale' must be positive, got ", scale);
  scale_ = scale;
  // Counts of steps, exactly representable: a larger or fractional one is no count.
  auto count = [&](const char* key) {
    const double v = get(key);
    if (v > 9007199254740992.0 || v != std::floor(v))
      throw std::invalid_argument(std::string("GradScaler state: '") + key + "' is " +
                                  std::to_string(v) + ", not a step count (a whole number in [0, 2^53])");
    return static_cast<int64_t>(v);
  };
  growth_tracker_ = count("growth_tracker");
  skipped_ = count("skipped_steps");
}

}  // namespace ringflow::optim
