// Optimizer: the base of SGD, Adam and AdamW. It holds one group of parameters (leaf
// tensors), one learning rate that schedules read and set (lr_schedule.h), and per-parameter
// state (momentum buffers, Adam moments) as named tensors, so that a checkpoint can save
// and restore it with the model (state_dict / load_state_dict).
//
// step() runs under NoGradGuard with in-place updates: parameters that share one dense
// layout with their gradient and state go to the device's fused kernel, all at once
// (FusedStep); others get the same rule composed of tensor ops.
// Parameters whose .grad is undefined are skipped, as in PyTorch. step(GradScaling) is the
// grad scaler's fused step (GradScaler::step): the gradients still carry the loss scale.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::optim {

// A loss scale still in the gradients, and the flag its check set (GradScaler's fused step,
// as torch's fused optimizers' grad_scale and found_inf). The fused kernels multiply each
// gradient by inv_scale as they read it and skip the update on the device where found_inf is
// not 0 (kernels/backend.h's LossScale); gradients composed of tensor ops are multiplied by
// `inv`. The step reads found_inf once, after the fused launches.
struct GradScaling {
  Tensor inv_scale;  // f32 scalar on the parameters' device
  Tensor found_inf;  // f32 scalar there, set by Backend::check_scaled_grads
  double inv = 1;    // inv_scale's value
};

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // The same from gradients that still carry a loss scale: unscaled as they are read; where
  // scaling.found_inf is set, no parameter or state changes (as if step were not called) and
  // it returns false. The parameters with gradients must all be on found_inf's device.
  virtual bool step(const GradScaling& scaling) = 0;

  // set_to_none = true (PyTorch 2's default; 1.13's was false) drops every .grad, so that
  // the next backward writes a fresh gradient instead of adding into zeros; false fills
  // the existing gradients with zeros.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::vector<Tensor>& params() const { return params_; }

  // State as named tensors: "state.<param index>.<key>" (keys from state_keys(), e.g.
  // "momentum_buffer", "exp_avg", "exp_avg_sq", "step") and "lr" (0-d f64). Tensors alias
  // the live state; save or clone them. Parameters without state yet (before their first
  // step) have no entries.
  std::map<std::string, Tensor> state_dict() const;
  // Copies the entries into this optimizer's state (converted to each parameter's dtype
  // and device). Throws std::invalid_argument naming the entry on an unknown or malformed
  // name, a parameter index out of range, a shape that differs from the parameter's, a
  // parameter whose state is only partly given, an lr that is no learning rate (negative,
  // inf, NaN), or a "step" that is no whole number in [0, 2^53].
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // The names of one parameter's state entries ("step" is a 0-d f64 tensor on the cpu,
  // every other entry has the parameter's shape, dtype and device).
  virtual std::vector<std::string> state_keys() const = 0;

 protected:
  // state_[i]: parameter i's entries, empty until its first step.
  std::vector<Tensor> params_;
  std::vector<std::map<std::string, Tensor>> state_;
  double lr_;
};

// The parameters of one step that go to the device's fused optimizer kernel
// (Backend::sgd_step, adam_step): those whose tensors (param, grad, state...) are defined,
// floating, on one device, of one dtype, shape and dense layout. One kernel call per
// (device, dtype) runs them all; the rest are composed of tensor ops by the caller.
class FusedStep {
 public:
  // Takes {param, grad, state0[, state1]} when they fuse; false when they do not.
  bool add(const std::vector<Tensor>& tensors);
  // Runs the kernel `entry` with `step` over every group, then marks the written tensors.
  // scaling (may be null): the step's LossScale, read on the device.
  template <class Step>
  void run(void (*Backend::*entry)(DType, const std::vector<OptimizerSlot>&, const Step&),
           const char* op, Step step, const GradScaling* scaling = nullptr);

 private:
  struct Group {
    Device device;
    DType dtype;
    std::vector<OptimizerSlot> slots;
    std::vector<Tensor> written;  // params and states, versions bumped after the kernel
  };
  std::vector<Group> groups_;
};

// The LossScale of `scaling` for kernels on `device` (none without scaling).
LossScale loss_scale(const GradScaling* scaling, const Device& device, const char* op);

template <class Step>
void FusedStep::run(void (*Backend::*entry)(DType, const std::vector<OptimizerSlot>&, const Step&),
                    const char* op, Step step, const GradScaling* scaling) {
  for (Group& g : groups_) {
    step.scale = loss_scale(scaling, g.device, op);
    kernel(g.device, entry, op)(g.dtype, g.slots, step);
    for (const Tensor& t : g.written) t.storage()->bump_version();
  }
  groups_.clear();
}

}  // namespace ringflow::optim
