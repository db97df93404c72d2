#include "ringflow/framework/graphed_step.h"

#include <stdexcept>

#include "ringflow/kernels/cuda_graph.h"

namespace ringflow {

GraphedStep::GraphedStep(Device device, int warmup, std::function<void()> body, std::vector<Tensor> params,
                         std::function<void(const std::string&)> on_fallback)
    : warmup_(warmup), body_(std::move(body)), params_(std::move(params)), on_fallback_(std::move(on_fallback)) {
  if (!device.is_cuda()) {
    fall_back("CUDA graphs need a CUDA device, not " + device.str());
    return;
  }
  try {
    auto graph = std::make_shared<CudaGraph>(device.index);
    ops_ = {[g = graph.get()] { g->capture_begin(); }, [g = graph.get()] { g->capture_end(); },
            [g = graph.get()] { g->replay(); }};
    graph_ = graph;
  } catch (const std::exception& e) {
    fall_back(e.what());
  }
}

GraphedStep::GraphedStep(int warmup, std::function<void()> body, GraphOps ops, std::vector<Tensor> params,
                         std::function<void(const std::string&)> on_fallback)
    : warmup_(warmup), body_(std::move(body)), ops_(std::move(ops)), params_(std::move(params)),
      on_fallback_(std::move(on_fallback)) {}

GraphedStep::~GraphedStep() = default;

void GraphedStep::run() {
  if (state_ == State::replaying) {
    ops_.replay();
    for (size_t i = 0; i < params_.size(); ++i)
      if (grads_[i].defined()) params_[i].set_grad(grads_[i]);
    return;
  }
  if (state_ == State::eager || calls_++ < warmup_) {
    body_();
    return;
  }
  capture();
}

// The capture ran nothing: replay it (the step of this call), or run the body eagerly.
void GraphedStep::capture() {
  try {
    ops_.begin();
    try {
      body_();
    } catch (...) {
      try {
        ops_.end();
      } catch (...) {  // the body's error says more
      }
      throw;
    }
    ops_.end();
  } catch (const std::exception& e) {
    fall_back(e.what());
    body_();
    return;
  }
  grads_.clear();
  for (const Tensor& p : params_) grads_.push_back(p.grad());
  state_ = State::replaying;
  run();
}

void GraphedStep::fall_back(const std::string& why) {
  state_ = State::eager;
  reason_ = why;
  graph_.reset();
  if (on_fallback_) on_fallback_("cuda graphs: the step is not captured (" + why + "); it runs eagerly");
}

}  // namespace ringflow
