// GradScaler: dynamic loss scaling for fp16 mixed precision, with the rule of PyTorch's
// torch.cuda.amp.GradScaler. fp16 keeps 5 exponent bits: gradients below 6e-8 flush to zero.
// The loss is multiplied by the scale before backward so that they survive; before the
// optimizer step the gradients are divided by it and checked. A step with an inf or NaN
// gradient is skipped (the parameters and the optimizer's state stay as they were) and the
// scale halves; after growth_interval finite steps in a row it doubles. The scale lives on
// the device too, so that a captured step (CUDA graph) replays with the current one. On CUDA,
// step() checks the gradients (one launch per dtype, reading only) and the optimizer's fused
// kernels unscale them as they read them and skip on the device (Note [The grad scaler's
// fused step]); an explicit unscale_ is one launch per (device, dtype) where the device's
// table has unscale_grads. One read of the inf flag per step.
//
//   Tensor loss = ...;                 // forward under AutocastGuard(DType::f16)
//   scaler.scale(loss).backward();
//   scaler.unscale_(sgd);              // optional: before clip_grad_norm_
//   scaler.step(sgd);                  // skipped on inf/NaN
//   scaler.update();
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ringflow/framework/optim/optimizer.h"

namespace ringflow::optim {

struct GradScalerOptions {
  double init_scale = 65536;  // 2^16
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (differentiable).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of the optimizer's parameters by the scale, in place, and notes
  // whether any is inf or NaN. Once per step: a second call before update() throws.
  void unscale_(Optimizer& optimizer);
  // unscale_ (unless done), then the optimizer's step, unless a gradient was inf or NaN; on CUDA
  // without an unscale_ before, the check and the optimizer's fused step with the scale
  // (the gradients then keep the scale). Returns whether it stepped. Once per update().
  bool step(Optimizer& optimizer);
  // The scale for the next step: halved after a skipped step, doubled after
  // growth_interval finite ones in a row.
  void update();

  double get_scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }  // since construction (or the checkpoint)

  // For checkpoints: "scale", "growth_tracker", "skipped_steps".
  std::map<std::string, double> state_dict() const;
  // Throws std::invalid_argument naming the entry when one is missing or out of range.
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;  // finite steps in a row
  int64_t skipped_ = 0;
  bool unscaled_ = false;       // unscale_ ran this step
  bool stepped_ = false;        // step ran since the last update
  bool found_inf_any_ = false;
  // Device scalars: the scale and its inverse (as scale_), and per device a flag that
  // unscale_grads sets on an inf or NaN (zeroed again after each read).
  mutable Tensor scale_tensor_, inv_scale_tensor_;
  std::map<std::string, Tensor> found_inf_;
  const Tensor& device_scalar(Tensor& t, double value, Device device) const;
  Tensor& found_flag(Device device);  // found_inf_'s flag of the device, made at first use
  // The check and the optimizer's step(GradScaling); nullopt where it does not apply.
  std::optional<bool> fused_step(Optimizer& optimizer);
};

}  // namespace ringflow::optim
