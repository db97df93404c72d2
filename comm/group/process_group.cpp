// The argument checks every backend shares: one place, run on the caller's thread before
// a collective is queued, so that a bad call throws where it was made.
#include "ringflow/comm/group/process_group.h"

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

void check_tensor(const char* what, const char* role, const Tensor& t) {
  RF_CHECK(t.defined(), what, ": ", role, " tensor is undefined");
  RF_CHECK(t.is_contiguous(), what, ": ", role,
           " tensor is not contiguous; call .contiguous() and copy the result back");
}

void check_options(const char* what, const ProcessGroup& pg, const CollectiveOptions& o) {
  RF_CHECK(o.root >= 0 && o.root < pg.size(), what, ": root ", o.root,
           " outside the group of ", pg.size(), " ranks");
  RF_CHECK(o.timeout.count() > 0, what, ": timeout must be positive, got ",
           o.timeout.count(), " ms");
}

// output must hold size() blocks of input's count, of input's dtype, on input's device.
void check_blocks(const char* what, const ProcessGroup& pg, const Tensor& whole,
                  const Tensor& block) {
  RF_CHECK(whole.dtype() == block.dtype(), what, ": dtypes differ (",
           dtype_name(whole.dtype()), " vs ", dtype_name(block.dtype()), ")");
  RF_CHECK(whole.device() == block.device(), what, ": the tensors are on different devices (",
           whole.device().str(), " vs ", block.device().str(), ")");
  RF_CHECK(whole.numel() == block.numel() * pg.size(), what, ": the whole tensor has ",
           whole.numel(), " elements, expected size() * ", block.numel(), " = ",
           block.numel() * pg.size());
}

}  // namespace

void ProcessGroup::check_device(const char* what, const char* role, Device device) const {
  RF_CHECK(device.is_cpu(), what, ": ", role, " tensor is on ", device.str(), "; the ",
           backend_name(), " process group takes CPU tensors");
}

Algorithm ProcessGroup::resolve_allreduce(size_t bytes, Algorithm algo) const {
  return algo == Algorithm::automatic ? choose_allreduce(bytes, size()) : algo;
}

Traffic ProcessGroup::allreduce_traffic_model(int64_t count, DType dtype, Algorithm algo) const {
  const size_t elem = dtype_size(dtype);
  return allreduce_traffic(resolve_allreduce(static_cast<size_t>(count) * elem, algo), count,
                           elem, size(), rank());
}

void ProcessGroup::set_comm_thread_cpus(const std::vector<int>&) {
  throw std::invalid_argument(cat("set_comm_thread_cpus: the ", backend_name(),
                                  " group has no communication thread to place"));
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor,
                                              const CollectiveOptions& options) {
  check_tensor("broadcast", "the", tensor);
  check_device("broadcast", "the", tensor.device());
  check_options("broadcast", *this, options);
  return do_broadcast(tensor, options);
}

std::shared_ptr<Work> ProcessGroup::reduce(const Tensor& tensor,
                                           const CollectiveOptions& options) {
  check_tensor("reduce", "the", tensor);
  check_device("reduce", "the", tensor.device());
  check_options("reduce", *this, options);
  return do_reduce(tensor, options);
}

std::shared_ptr<Work> ProcessGroup::allreduce(const Tensor& tensor,
                                              const CollectiveOptions& options) {
  check_tensor("allreduce", "the", tensor);
  check_device("allreduce", "the", tensor.device());
  check_options("allreduce", *this, options);
  return do_allreduce(tensor, options);
}

std::shared_ptr<Work> ProcessGroup::allgather(const Tensor& output, const Tensor& input,
                                              const CollectiveOptions& options) {
  check_tensor("allgather", "input", input);
  check_device("allgather", "input", input.device());
  check_tensor("allgather", "output", output);
  check_device("allgather", "output", output.device());
  check_options("allgather", *this, options);
  check_blocks("allgather", *this, output, input);
  return do_allgather(output, input, options);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input,
                                                   const CollectiveOptions& options) {
  check_tensor("reduce_scatter", "input", input);
  check_device("reduce_scatter", "input", input.device());
  check_tensor("reduce_scatter", "output", output);
  check_device("reduce_scatter", "output", output.device());
  check_options("reduce_scatter", *this, options);
  check_blocks("reduce_scatter", *this, input, output);
  return do_reduce_scatter(output, input, options);
}

std::shared_ptr<Work> ProcessGroup::gather(const Tensor& output, const Tensor& input,
                                           const CollectiveOptions& options) {
  check_tensor("gather", "input", input);
  check_device("gather", "input", input.device());
  check_options("gather", *this, options);
  if (rank() == options.root) {
    check_tensor("gather", "output", output);
    check_device("gather", "output", output.device());
    check_blocks("gather", *this, output, input);
  }
  return do_gather(output, input, options);
}

std::shared_ptr<Work> ProcessGroup::scatter(const Tensor& output, const Tensor& input,
                                            const CollectiveOptions& options) {
  check_tensor("scatter", "output", output);
  check_device("scatter", "output", output.device());
  check_options("scatter", *this, options);
  if (rank() == options.root) {
    check_tensor("scatter", "input", input);
    check_device("scatter", "input", input.device());
    check_blocks("scatter", *this, input, output);
  }
  return do_scatter(output, input, options);
}

std::shared_ptr<Work> ProcessGroup::barrier(const CollectiveOptions& options) {
  check_options("barrier", *this, options);
  return do_barrier(options);
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& tensor, int peer, int tag,
                                         const CollectiveOptions& options) {
  check_tensor("send", "the", tensor);
  check_device("send", "the", tensor.device());
  check_options("send", *this, options);
  RF_CHECK(peer >= 0 && peer < size() && peer != rank(), "send: peer ", peer,
           " is not another rank of the group of ", size());
  RF_CHECK(tag >= 0, "send: tag ", tag, " must be >= 0");
  return do_send(tensor, peer, tag, options);
}

std::shared_ptr<Work> ProcessGroup::recv(const Tensor& tensor, int peer, int tag,
                                         const CollectiveOptions& options) {
  check_tensor("recv", "the", tensor);
  check_device("recv", "the", tensor.device());
  check_options("recv", *this, options);
  RF_CHECK(peer >= 0 && peer < size() && peer != rank(), "recv: peer ", peer,
           " is not another rank of the group of ", size());
  RF_CHECK(tag >= 0, "recv: tag ", tag, " must be >= 0");
  return do_recv(tensor, peer, tag, options);
}

}  // namespace ringflow::comm
