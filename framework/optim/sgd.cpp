#include "ringflow/framework/optim/sgd.h"

#include <algorithm>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::optim {
SGD::SGD(std::vector<Tensor> params, const SGDOptions& o) : Optimizer(std::move(params), o.lr), options_(o) {
  RF_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum);
  RF_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay);
  RF_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: Nesterov momentum requires a momentum and zero dampening");
}

std::vector<std::string> SGD::state_keys() const { return {"momentum_buffer"}; }

void SGD::step() { update(nullptr); }

bool SGD::step(const GradScaling& scaling) { return update(&scaling); }

bool SGD::update(const GradScaling* scaling) {
  NoGradGuard no_grad;
  const SGDOptions& o = options_;
  const bool use_momentum = o.momentum != 0;
  // Buffers made this step take d (first) in a call of their own; parameters that do not fuse
  // are composed of tensor ops after the fused launches (when a loss scale's flag allows).
  FusedStep later, first;
  std::vector<size_t> composed, made;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const bool is_first = use_momentum && !state_[i].count("momentum_buffer");
    if (is_first) {
      state_[i]["momentum_buffer"] = empty_like(p);
      made.push_back(i);
    }
    const Tensor buf = use_momentum ? state_[i]["momentum_buffer"] : Tensor();
    if (!(is_first ? first : later).add(use_momentum ? std::vector<Tensor>{p, g, buf} : std::vector<Tensor>{p, g}))
      composed.push_back(i);
  }
  SgdStep h{lr_, o.momentum, o.dampening, o.weight_decay, o.nesterov, /*first=*/false, /*scale=*/{}};
  later.run(&Backend::sgd_step, "sgd_step", h, scaling);
  h.first = true;
  first.run(&Backend::sgd_step, "sgd_step", h, scaling);
  if (scaling && scaling->found_inf.item() != 0) {  // skipped on the device: no state is new either
    for (size_t i : made) state_[i].erase("momentum_buffer");
    return false;
  }
  for (size_t i : composed) {  // any layout: the same rule with tensor ops
    Tensor p = params_[i];
    const Tensor g = scaling ? mul(p.grad(), scaling->inv) : p.grad();
    Tensor d = o.weight_decay != 0 ? add(g, mul(p, o.weight_decay)) : g;
    if (use_momentum) {
      Tensor buf = state_[i]["momentum_buffer"];
      if (std::find(made.begin(), made.end(), i) != made.end()) buf.copy_(d);
      else buf.mul_(o.momentum).add_(d, 1 - o.dampening);
      d = o.nesterov ? add(d, mul(buf, o.momentum)) : buf;
    }
    p.add_(d, -lr_);
  }
  return true;
}

}  // namespace ringflow::optim
