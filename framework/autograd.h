// Reverse-mode automatic differentiation. Each differentiable op records a Node holding its
// saved inputs and a backward rule; backward() walks the graph from the root in reverse
// topological order, summing the gradients that reach each node, and accumulates into the
// .grad of leaves through their AccumulateGrad node.
//
// Note [Gradient-ready hooks]: a leaf's post-accumulate hooks fire as soon as its
// AccumulateGrad has received every contribution of this pass (AccumulateGrad runs before
// any other ready node), and queue_callback() runs after the whole pass. The DDP reducer
// launches a bucket's allreduce from the first and waits for all of them in the second.
//
// Note [Gradient buffers]: a leaf may name the memory its gradient is to live in
// (set_grad_buffer; the DDP reducer names each parameter's view of its bucket). When a
// backward pass starts with the leaf's .grad none, the gradient lands in that buffer and
// .grad becomes it: a node whose gradient goes straight to the leaf's AccumulateGrad, as the
// only contribution of the pass, offers the buffer to its backward rule (new_input_grad),
// and a rule that computes into it (conv2d, batch_norm, linear) leaves nothing to copy; any
// other gradient is copied in once by AccumulateGrad (counted by grad_buffer_copy_bytes).
// A .grad already there (zero_grad(set_to_none=false), or gradient accumulation) is added
// into in place, as without a buffer. A gradient kept from an earlier pass (a handle on the
// buffer) is overwritten by the next pass that starts from none: clone it to keep it.
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

// Note [Gradient buffers]. buffer: contiguous, of leaf's shape, dtype and device (an
// undefined tensor removes the leaf's buffer). Throws std::invalid_argument otherwise.
void set_grad_buffer(const Tensor& leaf, const Tensor& buffer);
// Inside a backward rule: the tensor to compute the gradient of the node's input `input`
// into, of `shape`, `dtype` and `device`: the leaf's gradient buffer where Note [Gradient
// buffers] offers it, else a new contiguous tensor. Return it as that input's gradient.
Tensor new_input_grad(size_t input, const Shape& shape, DType dtype, Device device);
// Bytes of gradients AccumulateGrad has copied into gradient buffers, in this process.
int64_t grad_buffer_copy_bytes();

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
