#include "ringflow/framework/autograd.h"

#include <atomic>
#include <limits>
#include <queue>
#include <unordered_map>

#include "ringflow/framework/autocast.h"
#include "ringflow/framework/ops.h"

namespace ringflow {
namespace {

thread_local bool grad_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};

// The callbacks of the backward pass running on this thread (null outside backward).
thread_local std::vector<std::function<void()>>* pass_callbacks = nullptr;
// The gradient buffers offered to the backward rule running on this thread, per input
// (Note [Gradient buffers]); null outside a rule.
thread_local const std::vector<Tensor>* offered_buffers = nullptr;
std::atomic<int64_t> buffer_copy_bytes{0};

// Sums the gradients a leaf receives into its .grad, then fires its hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    sequence_nr = std::numeric_limits<uint64_t>::max();  // run as soon as ready
  }
  std::string name() const override { return "AccumulateGrad"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    auto impl = leaf_.lock();
    if (!impl || !grads[0].defined()) return {};
    Tensor leaf(impl);
    AutogradMeta& meta = impl->meta();
    const Tensor& g = grads[0];
    if (meta.grad && meta.grad->defined()) {
      meta.grad->add_(g);
    } else if (meta.grad_buffer) {
      // Note [Gradient buffers]: in it already when the rule computed into it.
      Tensor& buffer = *meta.grad_buffer;
      if (g.impl() != buffer.impl()) {
        buffer.copy_(g);
        buffer_copy_bytes.fetch_add(g.numel() * static_cast<int64_t>(dtype_size(g.dtype())),
                                    std::memory_order_relaxed);
      }
      meta.grad = std::make_shared<Tensor>(buffer);
    } else {
      // Steal a fresh gradient nobody else holds; otherwise keep our own copy.
      const bool sole_owner = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 &&
                              g.is_contiguous() && g.numel() == shape_numel(g.shape()) &&
                              g.storage()->nbytes() == g.numel() * dtype_size(g.dtype());
      meta.grad = std::make_shared<Tensor>(sole_owner ? g.detach() : g.clone().detach());
    }
    for (const GradHook& hook : meta.post_accumulate_hooks) hook(leaf);
    return {};
  }

  // The leaf's gradient buffer while its .grad is none; undefined otherwise.
  Tensor free_buffer() const {
    auto impl = leaf_.lock();
    if (!impl || !impl->autograd) return {};
    const AutogradMeta& meta = *impl->autograd;
    if (!meta.grad_buffer || (meta.grad && meta.grad->defined())) return {};
    return *meta.grad_buffer;
  }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& meta = leaf.impl()->meta();
  auto acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.impl()->autograd->output_nr};
  return {grad_accumulator(t), 0};
}

struct ByPriority {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void add_into(Tensor& slot, const Tensor& g) {
  slot = slot.defined() ? add(slot, g) : g;
}

using Pending = std::unordered_map<Node*, std::vector<Tensor>>;  // gradients received per node

// Note [Gradient buffers]: per input of `node`, the buffer its rule may compute into: where
// the edge leads to a leaf's AccumulateGrad that no other edge of this pass leads to and
// that has received nothing yet, and the leaf's .grad is none.
std::vector<Tensor> buffers_to_offer(const Node& node, const Pending& pending,
                                     const std::unordered_map<Node*, int>& dependencies) {
  std::vector<Tensor> offered;
  for (size_t i = 0; i < node.next_edges.size(); ++i) {
    auto* acc = dynamic_cast<AccumulateGrad*>(node.next_edges[i].node.get());
    if (!acc || pending.count(acc)) continue;
    const auto d = dependencies.find(acc);
    if (d == dependencies.end() || d->second != 1) continue;
    Tensor buffer = acc->free_buffer();
    if (!buffer.defined()) continue;
    offered.resize(node.next_edges.size());
    offered[i] = std::move(buffer);
  }
  return offered;
}

// Applies node with offered as the buffers its rule may compute into.
std::vector<Tensor> apply_offering(Node& node, std::vector<Tensor>&& grads,
                                   const std::vector<Tensor>& offered) {
  struct Restore {
    const std::vector<Tensor>* outer;
    ~Restore() { offered_buffers = outer; }
  } restore{offered_buffers};
  offered_buffers = offered.empty() ? nullptr : &offered;
  return node.apply(std::move(grads));
}

}  // namespace

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  if (!fn_)
    throw std::runtime_error(cat(
        "trying to run backward through ", name_, " a second time: its saved tensors were "
        "freed by the first backward; pass retain_graph=true to the first backward"));
  return fn_(grads[0]);
}

bool grad_mode_enabled() { return grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }

bool grad_needed(const std::vector<Tensor>& inputs) {
  if (!grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& out, BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->sequence_nr = next_sequence_nr.fetch_add(1);
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next_edges.push_back(gradient_edge(t));
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
  }
  AutogradMeta& meta = out.impl()->meta();
  meta.requires_grad = true;
  meta.grad_fn = std::move(node);
  meta.output_nr = 0;
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  RF_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ",
           grads.size(), " gradients");
  const AutocastGuard no_autocast(DType::bf16, /*enabled=*/false);  // the forward's dtypes
  Pending buffers;
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    RF_CHECK(root.defined(), "backward: root ", i, " is an undefined tensor");
    RF_CHECK(root.requires_grad(), "backward: the tensor of shape ", shape_str(root.shape()),
             " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      RF_CHECK(root.numel() == 1, "backward: a gradient can be created implicitly only for "
               "one-element outputs, but the output has shape ", shape_str(root.shape()),
               "; pass a gradient of that shape");
      g = ones(root.shape(), root.dtype(), root.device());
    }
    RF_CHECK(g.shape() == root.shape(), "backward: gradient of shape ", shape_str(g.shape()),
             " for an output of shape ", shape_str(root.shape()));
    Edge edge = gradient_edge(root);
    auto& slots = buffers[edge.node.get()];
    if (slots.size() <= edge.input_nr) slots.resize(edge.input_nr + 1);
    add_into(slots[edge.input_nr], g);
    root_nodes.push_back(edge.node);
  }

  // Count, for each node reachable from the roots, the edges that lead into it.
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& n : root_nodes)
    if (!seen[n.get()]) { seen[n.get()] = true; stack.push_back(n.get()); }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++dependencies[e.node.get()];
      if (!seen[e.node.get()]) { seen[e.node.get()] = true; stack.push_back(e.node.get()); }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ByPriority> ready;
  std::unordered_map<Node*, bool> queued;
  for (auto& n : root_nodes)
    if (dependencies[n.get()] == 0 && !queued[n.get()]) { ready.push(n.get()); queued[n.get()] = true; }

  std::vector<std::function<void()>> callbacks;
  struct Restore {
    std::vector<std::function<void()>>* outer;
    ~Restore() { pass_callbacks = outer; }
  } restore{pass_callbacks};
  pass_callbacks = &callbacks;
  NoGradGuard no_grad;  // backward rules are not recorded (no higher-order gradients)

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = std::move(buffers[node]);
    buffers.erase(node);
    inputs.resize(1);
    // A node that no gradient reached still releases its successors' dependency counts.
    std::vector<Tensor> outputs;
    if (inputs[0].defined()) {
      outputs = apply_offering(*node, std::move(inputs),
                               buffers_to_offer(*node, buffers, dependencies));
    }
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      if (i < outputs.size() && outputs[i].defined()) {
        RF_CHECK(outputs[i].shape() == node->input_shapes[i], node->name(),
                 " returned a gradient of shape ", shape_str(outputs[i].shape()),
                 " for input ", i, " of shape ", shape_str(node->input_shapes[i]));
        auto& slots = buffers[e.node.get()];
        if (slots.size() <= e.input_nr) slots.resize(e.input_nr + 1);
        add_into(slots[e.input_nr], outputs[i]);
      }
      if (--dependencies[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  // Callbacks may queue further callbacks.
  for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();
}

void set_grad_buffer(const Tensor& leaf, const Tensor& buffer) {
  RF_CHECK(leaf.defined(), "set_grad_buffer: undefined leaf");
  if (buffer.defined()) {
    RF_CHECK(buffer.shape() == leaf.shape() && buffer.dtype() == leaf.dtype() &&
                 buffer.device() == leaf.device() && buffer.is_contiguous(),
             "set_grad_buffer: the buffer (", dtype_name(buffer.dtype()), " ",
             shape_str(buffer.shape()), " on ", buffer.device().str(),
             buffer.is_contiguous() ? "" : ", not contiguous", ") must be contiguous and ",
             dtype_name(leaf.dtype()), " ", shape_str(leaf.shape()), " on ", leaf.device().str(),
             ", as the leaf is");
  }
  leaf.impl()->meta().grad_buffer = buffer.defined() ? std::make_shared<Tensor>(buffer) : nullptr;
}

Tensor new_input_grad(size_t input, const Shape& shape, DType dtype, Device device) {
  if (offered_buffers && input < offered_buffers->size()) {
    const Tensor& b = (*offered_buffers)[input];
    if (b.defined() && b.shape() == shape && b.dtype() == dtype && b.device() == device) return b;
  }
  return empty(shape, dtype, device);
}

int64_t grad_buffer_copy_bytes() { return buffer_copy_bytes.load(std::memory_order_relaxed); }

void queue_callback(std::function<void()> fn) {
  if (!pass_callbacks)
    throw std::logic_error("queue_callback: only allowed while a backward pass runs");
  pass_callbacks->push_back(std::move(fn));
}

}  // namespace ringflow
