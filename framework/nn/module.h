// nn::Module: the base of every layer and model. A module owns named parameters (leaves that
// require grad), buffers (state that is not trained: BatchNorm's running statistics) and
// child modules, each kept in registration order, so that parameter names, state_dict keys
// and their order match PyTorch's (`layer1.0.conv1.weight`, `bn1.running_mean`).
//
// Layers keep Tensor members that are handles to the registered tensors (the same
// TensorImpl): to(dtype)/to(device) and load_state_dict() change the tensors in place, so the
// members, an optimizer's handles and the module's lists stay one and the same.
// Modules are held by std::shared_ptr and are neither copied nor moved.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ringflow/framework/random.h"
#include "ringflow/framework/serialize.h"
#include "ringflow/framework/tensor.h"

namespace ringflow::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedModules = std::vector<std::pair<std::string, ModulePtr>>;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // x -> y. Modules with more outputs (Inception's auxiliary head) offer extra methods.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& type_name() const { return type_name_; }

  // --- mode: propagates to every descendant.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // --- parameters, buffers, children. recurse: with the descendants', dotted names.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const NamedModules& named_children() const { return children_; }
  // This module as "" and every descendant (dotted names), depth first in registration order.
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;  // elements of all parameters
  // A registered child by (dotted) name; throws naming the name and the choices.
  ModulePtr child(const std::string& name) const;

  // --- state: parameters and buffers, per module its own parameters, then its own buffers,
  // then its children's (PyTorch's order). Tensors are the module's own (not copies).
  NamedTensors state_dict() const;
  // Copies `state` into the parameters and buffers (converting dtype, crossing devices).
  // strict: every key must be present and none may be extra. Throws std::invalid_argument
  // naming every missing key, unexpected key and shape mismatch (with both shapes) before
  // copying anything.
  void load_state_dict(const NamedTensors& state, bool strict = true);
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // Converts floating-point parameters and buffers to dtype (integer buffers such as
  // num_batches_tracked keep theirs); moves everything to device. Gradients are dropped.
  Module& to(DType dtype);
  Module& to(Device device);

  // Drops (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

 protected:
  // Registers a parameter: a leaf that requires grad. Returns the handle to keep as a member.
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  void add_child(const std::string& name, ModulePtr module);

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool params, bool buffers, bool recurse,
               NamedTensors* out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>* out);

  std::string type_name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  NamedModules children_;
};

}  // namespace ringflow::nn
