#include "ringflow/framework/nn/module.h"

#include <set>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::nn {

namespace {

// Makes `t` hold `value`'s storage, shape, strides, dtype and layout, keeping its TensorImpl
// (and so every handle to it) and its autograd flag; drops its gradient (PyTorch's
// param.data = ...).
void set_data(const Tensor& t, const Tensor& value) {
  TensorImpl* dst = t.impl();
  TensorImpl* src = value.impl();
  dst->storage = src->storage;
  dst->shape = src->shape;
  dst->strides = src->strides;
  dst->offset = src->offset;
  dst->dtype = src->dtype;
  dst->layout = src->layout;
  if (dst->autograd) dst->autograd->grad.reset();
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::check_new_name(const std::string& name, const char* what) const {
  RF_CHECK(!name.empty() && name.find('.') == std::string::npos,
           type_name_, ": bad ", what, " name '", name, "' (non-empty, no '.')");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  RF_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_,
           ": cannot register ", what, " '", name, "': the name is already taken");
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name, "parameter");
  RF_CHECK(value.defined(), type_name_, ": parameter '", name, "' is undefined");
  value = value.detach();
  if (requires_grad) value.requires_grad_(true);
  params_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name, "buffer");
  RF_CHECK(value.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, ModulePtr module) {
  check_new_name(name, "module");
  RF_CHECK(module != nullptr, type_name_, ": module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool params, bool buffers, bool recurse,
                     NamedTensors* out) const {
  if (params)
    for (const auto& [name, t] : params_) out->emplace_back(prefix + name, t);
  if (buffers)
    for (const auto& [name, t] : buffers_) out->emplace_back(prefix + name, t);
  if (recurse)
    for (const auto& [name, child] : children_)
      child->collect(prefix + name + ".", params, buffers, recurse, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", true, false, recurse, &out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, true, recurse, &out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>* out) {
  out->emplace_back(prefix, this);
  for (auto& [name, child] : children_)
    child->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", &out);
  return out;
}

ModulePtr Module::child(const std::string& name) const {
  const auto dot = name.find('.');
  const std::string head = name.substr(0, dot);
  for (const auto& [n, c] : children_)
    if (n == head) return dot == std::string::npos ? c : c->child(name.substr(dot + 1));
  std::vector<std::string> names;
  for (const auto& [n, c] : children_) names.push_back(n);
  throw std::invalid_argument(cat(type_name_, " has no child module '", head, "' (children: ",
                                  names.empty() ? "none" : join(names), ")"));
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

NamedTensors Module::state_dict() const {
  // Per module: own parameters, own buffers, then children (PyTorch's _save_to_state_dict).
  NamedTensors out;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m,
                                                                    const std::string& prefix) {
    m.collect(prefix, true, true, /*recurse=*/false, &out);
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".");
  };
  walk(*this, "");
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  const NamedTensors own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> known;
  for (const auto& [name, t] : own) {
    known.insert(name);
    const auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (!it->second.defined() || it->second.shape() != t.shape()) {
      mismatched.push_back(cat(name, ": loaded ",
                               it->second.defined() ? shape_str(it->second.shape()) : "undefined",
                               ", model ", shape_str(t.shape())));
    }
  }
  for (const auto& [name, t] : state)
    if (!known.count(name)) unexpected.push_back(name);
  std::string problems;
  if (strict && !missing.empty()) problems += "\n  missing keys: " + join(missing);
  if (strict && !unexpected.empty()) problems += "\n  unexpected keys: " + join(unexpected);
  if (!mismatched.empty()) problems += "\n  shape mismatch: " + join(mismatched);
  RF_CHECK(problems.empty(), "load_state_dict into ", type_name_, ":", problems);

  NoGradGuard no_grad;
  for (const auto& [name, t] : own) {
    const auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor target = t;
    target.copy_(it->second);
  }
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : state) {
    RF_CHECK(by_name.emplace(name, t).second, "load_state_dict into ", type_name_,
             ": key '", name, "' appears twice");
  }
  load_state_dict(by_name, strict);
}

Module& Module::to(DType dtype) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : state_dict())
    if (is_floating(t.dtype()) && t.dtype() != dtype) set_data(t, t.detach().to(dtype));
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : state_dict())
    if (t.device() != device) set_data(t, t.detach().to(device));
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : named_parameters()) {
    if (set_to_none) {
      t.set_grad(Tensor());
    } else if (t.grad().defined()) {
      Tensor g = t.grad();
      g.zero_();
    }
  }
}

}  // namespace ringflow::nn
