#include "ringflow/framework/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), state_(params_.size()), lr_(lr) {
  RF_CHECK(std::isfinite(lr) && lr >= 0, "optimizer: invalid learning rate ", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    RF_CHECK(params_[i].defined(), "optimizer: parameter ", i, " is an undefined tensor");
    RF_CHECK(params_[i].is_leaf(), "optimizer: parameter ", i,
             " is not a leaf tensor (pass the module's parameters, not results of ops)");
    for (size_t j = 0; j < i; ++j)
      RF_CHECK(params_[j].impl() != params_[i].impl(), "optimizer: parameter ", i,
               " is the same tensor as parameter ", j);
  }
}

void Optimizer::set_lr(double lr) {
  RF_CHECK(std::isfinite(lr) && lr >= 0, "optimizer: invalid learning rate ", lr);
  lr_ = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else Tensor(g).zero_();
  }
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [key, t] : state_[i]) out["state." + std::to_string(i) + "." + key] = t;
  out["lr"] = scalar_tensor(lr_, DType::f64);
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  const std::vector<std::string> keys = state_keys();
  std::vector<std::map<std::string, Tensor>> loaded(params_.size());
  double lr = lr_;
  for (const auto& [name, t] : state) {
    RF_CHECK(t.defined(), "optimizer state '", name, "': undefined tensor");
    if (name == "lr") {
      RF_CHECK(t.numel() == 1, "optimizer state 'lr': expected one value, got shape ",
               shape_str(t.shape()));
      lr = t.item();
      RF_CHECK(std::isfinite(lr) && lr >= 0, "optimizer state 'lr': ", lr, " is not a learning rate "
               "(a finite number >= 0)");
      continue;
    }
    const size_t dot = name.find('.', 6);
    RF_CHECK(name.starts_with("state.") && dot != std::string::npos && dot > 6,
             "optimizer state '", name, "': unexpected entry (expected 'lr' or "
             "'state.<param index>.<key>')");
    const std::string index_text = name.substr(6, dot - 6);
    const std::string key = name.substr(dot + 1);
    RF_CHECK(std::all_of(index_text.begin(), index_text.end(), ::isdigit) && index_text.size() < 10,
             "optimizer state '", name, "': '", index_text, "' is not a parameter index");
    const size_t i = std::stoul(index_text);
    RF_CHECK(i < params_.size(), "optimizer state '", name, "': parameter index ", i,
             " out of range (this optimizer has ", params_.size(), " parameters)");
    RF_CHECK(std::find(keys.begin(), keys.end(), key) != keys.end(), "optimizer state '", name,
             "': unknown key '", key, "' for this optimizer");
    const Tensor& p = params_[i];
    if (key == "step") {
      RF_CHECK(t.numel() == 1, "optimizer state '", name, "': expected one value, got shape ",
               shape_str(t.shape()));
      // A count of steps: Adam's bias correction divides by 1 - beta^step.
      const double step = t.item();
      RF_CHECK(step >= 0 && step <= 9007199254740992.0 && step == std::floor(step), "optimizer state '",
               name, "': ", step, " is not a step count (a whole number in [0, 2^53])");
      loaded[i][key] = scalar_tensor(step, DType::f64);
    } else {
      RF_CHECK(t.shape() == p.shape(), "optimizer state '", name, "': shape ",
               shape_str(t.shape()), " but parameter ", i, " has shape ", shape_str(p.shape()));
      RF_CHECK(t.dtype() == p.dtype(), "optimizer state '", name, "': dtype ",
               dtype_name(t.dtype()), " but parameter ", i, " is ", dtype_name(p.dtype()));
      Tensor copy = empty_like(p);
      NoGradGuard no_grad;
      copy.copy_(t);
      loaded[i][key] = copy;
    }
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (loaded[i].empty()) continue;
    for (const std::string& key : keys)
      RF_CHECK(loaded[i].count(key), "optimizer state: parameter ", i, " has some entries but not 'state.",
               i, ".", key, "'");
  }
  state_ = std::move(loaded);
  lr_ = lr;
}

LossScale loss_scale(const GradScaling* scaling, const Device& device, const char* op) {
  if (!scaling) return {};
  RF_CHECK(scaling->found_inf.device() == device && scaling->inv_scale.device() == device, op,
           ": a parameter on ", device.str(), " but the loss scale's flag on ", scaling->found_inf.device().str());
  return {scaling->inv_scale.kernel_view().ptr<const float>(), scaling->found_inf.kernel_view().ptr<const float>()};
}

bool FusedStep::add(const std::vector<Tensor>& tensors) {
  const Tensor& first = tensors.front();
  if (!first.defined() || !is_floating(first.dtype())) return false;
  if (!first.is_contiguous() && !first.is_channels_last()) return false;
  for (const Tensor& t : tensors)
    if (!t.defined() || t.device() != first.device() || t.dtype() != first.dtype() ||
        t.shape() != first.shape() || t.strides() != first.strides())
      return false;
  Group* group = nullptr;
  for (Group& g : groups_)
    if (g.device == first.device() && g.dtype == first.dtype()) group = &g;
  if (!group) group = &groups_.emplace_back(Group{first.device(), first.dtype(), {}, {}});
  OptimizerSlot slot;
  slot.param = first.kernel_view().data;
  slot.grad = tensors[1].kernel_view().data;
  for (size_t k = 2; k < tensors.size() && k < 4; ++k) slot.state[k - 2] = tensors[k].kernel_view().data;
  slot.numel = first.numel();
  group->slots.push_back(slot);
  group->written.push_back(first);
  for (size_t k = 2; k < tensors.size(); ++k) group->written.push_back(tensors[k]);
  return true;
}

}  // namespace ringflow::optim
