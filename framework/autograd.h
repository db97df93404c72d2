// Reverse-mode automatic differentiation. Each differentiable op records a Node holding its
// saved inputs and a backward rule; backward() walks the graph from the root in reverse
// topological order, summing the gradients that reach each node, and accumulates into the
// .grad of leaves through their AccumulateGrad node.
//
// Note [Gradient-ready hooks]: a leaf's post-accumulate hooks fire as soon as its
// AccumulateGrad has received every contribution of this pass (AccumulateGrad runs before
// any other ready node), and queue_callback() runs after the whole pass. The DDP reducer
// launches a bucket's allreduce from the first and waits for all of them in the second.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/tensor.h"

namespace ringflow {

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;
};

class Node {
 public:
  virtual ~Node() = default;
  // grads has one entry per output of the node; returns one gradient per next_edges entry
  // (undefined where there is none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward pass without retain_graph.
  virtual void release() {}
  virtual bool released() const { return false; }

  std::vector<Edge> next_edges;
  std::vector<Shape> input_shapes;  // expected gradient shape per next edge
  uint64_t sequence_nr = 0;         // creation order: later nodes run first
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad)>;

// A node whose backward rule is a function of the output gradient (one output).
class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return name_; }
  void release() override { fn_ = nullptr; }
  bool released() const override { return !fn_; }

 private:
  std::string name_;
  BackwardFn fn_;
};

// True when grad mode is on and any input requires grad.
bool grad_needed(const std::vector<Tensor>& inputs);
// Makes `out` the output of a new FunctionNode over `inputs` with backward rule `fn`.
// Call only when grad_needed(inputs). The rule must not capture `out` itself (that would
// make a cycle): capture out.detach().
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& out, BackwardFn fn);

// Runs backward from roots with the given gradients (undefined = ones for one-element roots).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

// During a backward pass: run fn once the pass has finished (see Note [Gradient-ready hooks]).
void queue_callback(std::function<void()> fn);

bool grad_mode_enabled();

// Disables recording on this thread while alive.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ringflow
