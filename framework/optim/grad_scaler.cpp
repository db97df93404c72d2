#include "ringflow/framework/optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>
#include <stdexcept>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
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

const Tensor& GradScaler::device_scalar(Tensor& t, double value, Device device) const {
  if (!t.defined() || t.device() != device) t = full({}, value, DType::f32, device);
  return t;
}

Tensor GradScaler::scale(const Tensor& loss) const {
  // Read from a device scalar that update() rewrites: a captured step (CUDA graph) replays
  // with the current scale, not with the one of its capture.
  const Tensor& s = device_scalar(scale_tensor_, scale_, loss.device());
  return mul(loss, s.dtype() == loss.dtype() ? s : s.to(loss.dtype()));
}

namespace {

// Gradients that one kernel call takes (unscale_grads, check_scaled_grads): dense, of one
// device and dtype.
struct GradGroup {
  Device device;
  DType dtype;
  std::vector<OptimizerSlot> slots;
  std::vector<Tensor> grads;
};

// Adds g to its group when the device's table has `entry` and g is dense and floating.
bool add_to_group(std::vector<GradGroup>& groups, const Tensor& g,
                  void (*Backend::*entry)(DType, const std::vector<OptimizerSlot>&, const View&, const View&)) {
  if (!(kernel_backend(g.device()).*entry) || !is_floating(g.dtype()) || !g.kernel_view().is_dense()) return false;
  auto it = std::find_if(groups.begin(), groups.end(),
                         [&](const GradGroup& x) { return x.device == g.device() && x.dtype == g.dtype(); });
  if (it == groups.end()) it = groups.insert(groups.end(), GradGroup{g.device(), g.dtype(), {}, {}});
  OptimizerSlot slot;
  slot.param = g.kernel_view().data;
  slot.numel = g.numel();
  it->slots.push_back(slot);
  it->grads.push_back(g);
  return true;
}

}  // namespace

Tensor& GradScaler::found_flag(Device device) {
  Tensor& found = found_inf_[device.str()];
  if (!found.defined()) found = zeros({}, DType::f32, device);
  return found;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  RF_CHECK(!unscaled_, "GradScaler: unscale_ called twice before update()");
  unscaled_ = true;
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  // Dense gradients on a device whose table has unscale_grads: one launch per (device,
  // dtype) scales them and notes an inf or NaN in found_inf. Others: scaled by tensor ops,
  // and finite exactly when their sum is (the gradients are far below f32's range).
  std::vector<GradGroup> groups;
  Tensor total;
  for (const Tensor& p : optimizer.params()) {
    Tensor g = p.grad();
    if (!g.defined() || add_to_group(groups, g, &Backend::unscale_grads)) continue;
    g.copy_(mul(g, inv));  // in place: ddp's gradients are views of its buckets
    const Tensor s = sum(g.to(DType::f32));
    total = total.defined() ? add(total, s.to(total.device())) : s;
  }
  for (const GradGroup& group : groups) {
    const Tensor& inv_scale = device_scalar(inv_scale_tensor_, inv, group.device);
    kernel(group.device, &Backend::unscale_grads, "unscale_grads")(group.dtype, group.slots, inv_scale.kernel_view(),
                                                                   found_flag(group.device).kernel_view());
    for (const Tensor& g : group.grads) g.storage()->bump_version();
  }
  for (auto& [device, found] : found_inf_) {
    if (found.item() == 0) continue;
    found_inf_any_ = true;
    found.zero_();
  }
  if (total.defined() && !std::isfinite(total.item())) found_inf_any_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  // As PyTorch: after a fused step the gradients still carry the scale, so a second step
  // before update() would take them at that scale.
  RF_CHECK(!stepped_, "GradScaler: step() called twice before update()");
  stepped_ = true;
  if (!unscaled_) {
    if (std::optional<bool> stepped = fused_step(optimizer)) return *stepped;
    unscale_(optimizer);
  }
  if (found_inf_any_) return false;
  optimizer.step();
  return true;
}

// Note [The grad scaler's fused step]: where every gradient is dense on one device whose table
// has check_scaled_grads (CUDA), the check reads them (one launch per dtype) and the
// optimizer's fused kernels unscale them as they read them, skipping on the device when the
// check found an inf or NaN: the separate unscale pass (a read and a write of every gradient)
// is gone, and the gradients keep the scale afterwards (as after torch's fused optimizers).
// The results equal unscale-then-step bit for bit. Elsewhere (the CPU, gradients on several
// devices or not dense), unscale_ then step as before.
std::optional<bool> GradScaler::fused_step(Optimizer& optimizer) {
  std::vector<GradGroup> groups;
  for (const Tensor& p : optimizer.params()) {
    const Tensor& g = p.grad();
    if (g.defined() && !add_to_group(groups, g, &Backend::check_scaled_grads)) return std::nullopt;
  }
  if (groups.empty()) return std::nullopt;
  const Device device = groups.front().device;
  for (const GradGroup& group : groups)
    if (group.device != device) return std::nullopt;
  unscaled_ = true;  // for update()
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  const GradScaling scaling{device_scalar(inv_scale_tensor_, inv, device), found_flag(device),
                            static_cast<float>(inv)};  // the value the f32 scalar holds
  for (const GradGroup& group : groups)
    kernel(device, &Backend::check_scaled_grads, "check_scaled_grads")(
        group.dtype, group.slots, scaling.inv_scale.kernel_view(), scaling.found_inf.kernel_view());
  const bool stepped = optimizer.step(scaling);
  if (!stepped) {
    found_inf_any_ = true;
    found_flag(device).zero_();
  }
  return stepped;
}

void GradScaler::update() {
  RF_CHECK(unscaled_, "GradScaler: update() without a step since the last one");
  const double before = scale_;
  if (found_inf_any_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  stepped_ = false;
  found_inf_any_ = false;
  // The device scalars follow (outside any captured step).
  NoGradGuard no_grad;
  if (scale_ != before) {
    if (scale_tensor_.defined()) scale_tensor_.fill_(scale_);
    if (inv_scale_tensor_.defined()) inv_scale_tensor_.fill_(1.0 / scale_);
  }
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
  scale_tensor_ = inv_scale_tensor_ = Tensor();  // made again from scale_ at their next use
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
