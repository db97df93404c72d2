#include "ringflow/framework/optim/adam.h"

#include <cmath>
#include <map>
#include <vector>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::optim {
Adam::Adam(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::move(params), o, /*decoupled=*/false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params), o.lr), options_(o), decoupled_(decoupled) {
  const char* name = decoupled ? "AdamW" : "Adam";
  RF_CHECK(o.eps >= 0, name, ": invalid eps ", o.eps);
  RF_CHECK(o.beta1 >= 0 && o.beta1 < 1, name, ": invalid beta1 ", o.beta1);
  RF_CHECK(o.beta2 >= 0 && o.beta2 < 1, name, ": invalid beta2 ", o.beta2);
  RF_CHECK(o.weight_decay >= 0, name, ": invalid weight_decay ", o.weight_decay);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& o)
    : Adam(std::move(params), o, /*decoupled=*/true) {}

std::vector<std::string> Adam::state_keys() const { return {"step", "exp_avg", "exp_avg_sq"}; }

void Adam::step() { update(nullptr); }

bool Adam::step(const GradScaling& scaling) { return update(&scaling); }

bool Adam::update(const GradScaling* scaling) {
  NoGradGuard no_grad;
  const AdamOptions& o = options_;
  // Parameters at the same step count share one fused call; parameters that do not fuse are
  // composed of tensor ops after the fused launches (when a loss scale's flag allows).
  std::map<double, FusedStep> fused;
  std::vector<size_t> stepped, composed, made;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    auto& st = state_[i];
    if (st.empty()) {
      st["step"] = scalar_tensor(0, DType::f64);
      st["exp_avg"] = zeros_like(p);
      st["exp_avg_sq"] = zeros_like(p);
      made.push_back(i);
    }
    Tensor& step_t = st["step"];
    const double t = step_t.item() + 1;
    step_t.data<double>()[0] = t;
    stepped.push_back(i);
    if (!fused[t].add({p, g, st["exp_avg"], st["exp_avg_sq"]})) composed.push_back(i);
  }
  for (auto& [t, step] : fused) step.run(&Backend::adam_step, "adam_step", constants(t), scaling);
  if (scaling && scaling->found_inf.item() != 0) {  // skipped on the device: the counts go back
    for (size_t i : stepped) state_[i]["step"].data<double>()[0] -= 1;
    for (size_t i : made) state_[i].clear();
    return false;
  }
  for (size_t i : composed) {  // any layout: the same rule with tensor ops
    Tensor p = params_[i];
    auto& st = state_[i];
    const AdamStep c = constants(st["step"].item());
    Tensor grad = scaling ? mul(p.grad(), scaling->inv) : p.grad();
    if (o.weight_decay != 0) {
      if (decoupled_) p.mul_(1 - lr_ * o.weight_decay);
      else grad = add(grad, mul(p, o.weight_decay));
    }
    Tensor m = st["exp_avg"], v = st["exp_avg_sq"];
    m.mul_(o.beta1).add_(grad, 1 - o.beta1);
    v.mul_(o.beta2).add_(mul(grad, grad), 1 - o.beta2);
    const Tensor denom = add(div(sqrt(v), c.bc2_sqrt), o.eps);
    p.add_(div(m, denom), -c.step_size);
  }
  return true;
}

AdamStep Adam::constants(double t) const {
  const AdamOptions& o = options_;
  return {lr_, o.beta1, o.beta2, o.eps, o.weight_decay, decoupled_,
          lr_ / (1 - std::pow(o.beta1, t)), std::sqrt(1 - std::pow(o.beta2, t))};
}

}  // namespace ringflow::optim
