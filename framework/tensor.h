// Tensor: a cheap handle to shared storage plus shape, strides, offset and dtype, and the
// autograd state (requires_grad, grad, grad_fn). Copies of a Tensor alias; views
// (reshape, permute, narrow, expand, ...) share storage. Functional ops are in ops.h.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "ringflow/framework/error.h"
#include "ringflow/framework/storage.h"
#include "ringflow/kernels/device.h"
#include "ringflow/kernels/dtype.h"
#include "ringflow/kernels/view.h"

namespace ringflow {

class Node;
class Tensor;

using GradHook = std::function<void(const Tensor&)>;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Tensor> grad;         // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;        // the node that produced this tensor (non-leaf)
  uint32_t output_nr = 0;               // which output of grad_fn
  std::weak_ptr<Node> grad_accumulator; // a leaf's AccumulateGrad, alive while a graph uses it
  std::vector<GradHook> post_accumulate_hooks;
  // A leaf's: where backward puts its gradient when .grad is none (Note [Gradient buffers]
  // in autograd.h); null: a fresh tensor.
  std::shared_ptr<Tensor> grad_buffer;
};

// Note [blocked tensors]: a CPU activation may lie in oneDNN's blocked layout
// (kernels/memory_layout.h) between the ops that take it (Note [blocked operands] in
// kernels/backend.h: convolutions, batch norm, pooling, relu, add), which then make no
// reorders. Its shape stays (N, C, H, W); strides are meaningless for it. Everything that
// reads its strides or elements (strides(), kernel_view(), raw_data(), and through them every
// view, copy, item, to_vector, checkpoint and other op) first converts it in place to a
// contiguous strided tensor, in one function (Tensor::strided_impl): the handle's storage is
// replaced by a converted copy, so the values seen through it never change and nothing reads
// blocked memory as strided. Other handles of the old storage (detach() shares it, as autograd
// does to save an activation) keep it blocked, so an in-place write through the converted
// handle is not seen through them, unlike PyTorch's detach() (in-place ops on activations are
// refused under grad mode anyway). Like any change of a tensor, the conversion is not safe
// while another thread uses the handle.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // elements (those of a contiguous tensor when blocked)
  int64_t offset = 0;  // elements
  DType dtype = DType::f32;
  MemoryLayout layout = MemoryLayout::strided;
  std::unique_ptr<AutogradMeta> autograd;  // created on first use

  AutogradMeta& meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage, used for "no tensor" (absent bias, no grad)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // --- metadata
  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return strided_impl().strides; }  // converts a blocked tensor
  MemoryLayout layout() const { return checked().layout; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int dim() const { return static_cast<int>(shape().size()); }
  int64_t numel() const;
  int64_t offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  bool is_contiguous() const;
  bool is_channels_last() const;  // 4-D, NHWC in memory
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  bool shares_storage(const Tensor& other) const;
  uint64_t version() const { return storage()->version(); }
  std::string str() const;  // PyTorch-like printing

  // What a kernel sees of this tensor (strided: a blocked tensor is converted first).
  View kernel_view() const;
  // The layout kernel_view_any_layout() hands kernels: a blocked tensor's own where the
  // device's kernel table takes blocked operands (Backend::blocked_layout), else strided.
  MemoryLayout kernel_layout() const;
  // For the ops of Note [blocked operands] only: this tensor in kernel_layout().
  View kernel_view_any_layout() const;

  // --- element access (CPU tensors). data<T>() checks that T matches dtype().
  void* raw_data() const;
  template <class T> T* data() const {
    check_access(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  double item() const;  // a one-element tensor's value, any dtype, any device
  template <class T> std::vector<T> to_vector() const;  // contiguous copy, on the host

  // --- views (share storage; differentiable)
  Tensor view(const Shape& shape) const;     // fails when the strides do not allow it
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy; one -1 allowed
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // --- copies (differentiable)
  Tensor contiguous() const;     // self when already contiguous
  Tensor channels_last() const;  // 4-D copy laid out NHWC (self when already)
  Tensor clone() const;          // same layout class (contiguous or channels-last)
  Tensor to(DType dtype) const;  // self when same dtype
  // In dtype and laid out channels-last (a 4-D tensor) or contiguous, in one copy; self when
  // it is so already.
  Tensor to(DType dtype, bool channels_last) const;
  Tensor to(Device device) const;

  // --- in place (not recorded by autograd: on a tensor that requires grad they are only
  // allowed under NoGradGuard, as in an optimizer step). They bump the storage version.
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype, crosses devices
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double factor);

  // --- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  Tensor grad() const;  // undefined until a backward reaches this leaf
  void set_grad(const Tensor& grad) const;
  // Runs backward from this tensor. `gradient` may be omitted for one-element tensors.
  // retain_graph keeps saved tensors so that backward can run through the graph again.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no autograd history
  // Called after this leaf's .grad has received every contribution of a backward pass.
  void register_post_accumulate_grad_hook(GradHook hook) const;

 private:
  TensorImpl& checked() const;
  TensorImpl& strided_impl() const;  // Note [blocked tensors]
  void check_access(DType expected) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// The strides that let a tensor of (shape, strides) be viewed as new_shape without a copy,
// or an empty optional (PyTorch's computeStride).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape,
                  Shape* new_strides);

int64_t wrap_dim(int64_t dim, int64_t ndim);  // throws naming dim and rank

}  // namespace ringflow
