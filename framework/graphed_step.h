// A training step run eagerly for its first `warmup` calls, then captured once as a CUDA
// graph (kernels/cuda_graph.h) and replayed from then on (train and bench/train_step
// --cuda-graphs): one launch per step instead of one per kernel. Warm-up first, so that what
// a step does once (cuDNN's algorithm search, the optimizer's state, allocations of the
// caching allocator) happens outside the capture.
//
// The step body must queue the same work every call on the same tensors: inputs copied into
// the step's own tensors before run(), results read from the tensors it wrote after it, no
// synchronisation with the host inside (no .item()), host values (a learning rate) fixed.
// Where the capture fails anyway, the step says why once (on_fallback) and runs eagerly from
// then on: a failed capture ran nothing, so that call runs the body again, eagerly.
//
// Gradients: the tensors the captured backward wrote into are the parameters' .grad after
// every replay (re-attached: a zero_grad(set_to_none) outside the step drops them).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/tensor.h"

namespace ringflow {

// How a step is captured and replayed: a CudaGraph's, or a test's own.
struct GraphOps {
  std::function<void()> begin, end, replay;  // end throws when the capture failed
};

class GraphedStep {
 public:
  enum class State { warming_up, replaying, eager };

  // On `device`: a CUDA device captures; on another the step says so and stays eager.
  GraphedStep(Device device, int warmup, std::function<void()> body, std::vector<Tensor> params = {},
              std::function<void(const std::string&)> on_fallback = {});
  GraphedStep(int warmup, std::function<void()> body, GraphOps ops, std::vector<Tensor> params = {},
              std::function<void(const std::string&)> on_fallback = {});
  ~GraphedStep();

  void run();
  State state() const { return state_; }
  const std::string& fallback_reason() const { return reason_; }  // empty unless eager

 private:
  void capture();
  void fall_back(const std::string& why);

  int warmup_;
  int calls_ = 0;
  std::function<void()> body_;
  GraphOps ops_;
  std::shared_ptr<void> graph_;  // the CudaGraph behind ops_, when there is one
  std::vector<Tensor> params_;
  std::vector<Tensor> grads_;  // what the capture left in params_' .grad
  std::function<void(const std::string&)> on_fallback_;
  State state_ = State::warming_up;
  std::string reason_;
};

}  // namespace ringflow
