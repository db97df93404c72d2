// Note [DDP reducer]
// State, as PyTorch's reducer keeps it but smaller: buckets (a flat buffer, its parameters,
// a count of gradients still pending, the reduction in flight), and per parameter its bucket
// and its view: buffer[offset, offset + numel) shaped as the parameter.
//
// Gradients as views. Every parameter's .grad is kept as its view into its bucket, so that
// the reduction runs in place on the buffer and the averaged gradients are in .grad when it
// completes, with no copy out. Each view is also the parameter's gradient buffer (Note
// [Gradient buffers] in framework/autograd.h): when .grad is none (zero_grad's default,
// set_to_none=true) the kernels of conv2d, batch_norm and linear write the gradient straight
// into the bucket, with no copy in either (PyTorch's gradient_as_bucket_view copies it there
// once); other gradients are copied in by AccumulateGrad. An existing .grad
// (zero_grad(set_to_none=false), or accumulation under no_sync) is added into in place, which
// costs the zeroing and a read of the old values: set_to_none=true is the cheaper way.
//
// The iteration. DistributedDataParallel::forward arms the reducer (prepare_for_backward) and
// wraps the output in an identity node. Backward reaches that node before any parameter's
// gradient (every parameter the output depends on is upstream of it); it queues finalize()
// to run when the pass ends (Note [Gradient-ready hooks] in framework/autograd.h). Each
// parameter's post-accumulate hook marks it ready; when a bucket has no gradient pending,
// the buckets are launched from the first one not yet launched for as long as they are
// complete: strictly in bucket order, so that every rank issues the same collectives in the
// same order (Note [collective order] in comm/group/process_group.h) whatever order its gradients
// arrive in. finalize() waits for every bucket in order and runs the hook's `then`.
//
// Parameters without a gradient. A parameter that the loss does not reach gets no hook call.
// finalize() counts it as a zero contribution (its view zeroed unless it already holds this
// rank's accumulated gradient), which launches the buckets still waiting, so the job never
// hangs; its .grad becomes the average of the other ranks' gradients. With
// find_unused_parameters the graph is walked after forward and such parameters are marked
// ready when backward starts, so their buckets need not wait for the end. A parameter
// unused on every rank gets a zero .grad rather than none (PyTorch keeps none there, at the
// cost of an extra collective per iteration).
//
// Rebuilding. Buckets start in reverse registration order (roughly the order backward
// produces gradients). The first backward records the order the hooks actually fire in; at
// the end of the first synchronised backward rank 0's order is broadcast (ranks may differ
// with data-dependent control flow, and they must agree on the buckets) and the buckets are
// re-assigned from it, once, as PyTorch's rebuild_buckets does (it skips the rebuild under
// find_unused_parameters; here unused parameters go last). Unlike PyTorch, that first
// backward launches nothing while it runs: its buckets are reduced after the rebuild, in
// the rebuilt buckets. So every synchronised backward reduces in the same buckets, and
// the sums of a run resumed from a checkpoint (whose first backward rebuilds again, from
// the same graph) round as the uninterrupted run's did: at 3 ranks and more the ring's
// order of addition per element depends on where the buckets start. The price is the
// overlap of one iteration. A bucket that completes while an earlier one still waits is
// held back (stats().held_back), which the rebuilt order avoids.
#include "ringflow/comm/ddp/reducer.h"

#include <stdexcept>
#include <unordered_set>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::vector<BucketTensor> bucket_tensors(const std::vector<Tensor>& params) {
  std::vector<BucketTensor> sizes;
  for (const Tensor& p : params) {
    sizes.push_back({p.numel() * static_cast<int64_t>(dtype_size(p.dtype())), p.dtype()});
  }
  return sizes;
}

// Each gradient starts 16-byte aligned in its bucket, as a tensor of its own would: kernels
// write weight gradients straight into the bucket, and cuDNN's fail on a misaligned address
// (seen on an H100). The few elements between stay zero and are reduced with the rest. The
// same on every device, so that ranks on different devices hold buckets of one size.
int64_t aligned_offset(int64_t offset, DType dtype) {
  constexpr int64_t kAlignBytes = 16;
  const int64_t step = std::max<int64_t>(1, kAlignBytes / static_cast<int64_t>(dtype_size(dtype)));
  return (offset + step - 1) / step * step;
}

}  // namespace

std::shared_ptr<Reducer> Reducer::create(std::vector<Tensor> params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options) {
  std::shared_ptr<Reducer> reducer(
      new Reducer(std::move(params), std::move(names), std::move(pg), std::move(options)));
  // Hooks hold the reducer weakly: a parameter may outlive its DistributedDataParallel.
  std::weak_ptr<Reducer> weak = reducer;
  for (size_t i = 0; i < reducer->params_.size(); ++i) {
    reducer->params_[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->on_grad_ready(i);
    });
  }
  return reducer;
}

Reducer::Reducer(std::vector<Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> pg, ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), pg_(std::move(pg)),
      options_(std::move(options)) {
  RF_CHECK(pg_, "Reducer: null process group");
  RF_CHECK(names_.size() == params_.size(), "Reducer: ", names_.size(), " names for ",
           params_.size(), " parameters");
  for (size_t i = 0; i < params_.size(); ++i) {
    RF_CHECK(params_[i].defined() && params_[i].is_leaf() && params_[i].requires_grad(),
             "Reducer: parameter '", names_[i], "' is not a leaf that requires grad");
    RF_CHECK(params_[i].device() == params_[0].device(), "Reducer: parameter '", names_[i],
             "' is on ", params_[i].device().str(), ", parameter '", names_[0], "' on ",
             params_[0].device().str(), "; one device per model");
  }
  caps_ = bucket_caps(options_.first_bucket_cap_mb, options_.bucket_cap_mb);
  if (options_.tune_bucket_caps) {
    tuner_ = std::make_unique<BucketTuner>(options_.tuner);
    caps_ = tuner_->current().bytes();
  }
  if (!options_.comm_hook) options_.comm_hook = std::make_shared<AllreduceAverageHook>();

  order_.resize(params_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = order_.size() - 1 - i;
  build_buckets(assign_buckets(bucket_tensors(params_), order_, caps_));
}

// A model trained on after its DistributedDataParallel is gone gets fresh gradients again.
Reducer::~Reducer() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& buffer = params_[i].impl()->meta().grad_buffer;
    if (buffer && buffer->impl() == views_[i].impl()) set_grad_buffer(params_[i], Tensor());
  }
}

void Reducer::set_comm_hook(std::shared_ptr<CommHook> hook) {
  RF_CHECK(!armed_, "set_comm_hook: not between a forward and its backward");
  options_.comm_hook = hook ? std::move(hook) : std::make_shared<AllreduceAverageHook>();
}

void Reducer::build_buckets(std::vector<std::vector<size_t>> assignment) {
  std::vector<Bucket> buckets(assignment.size());
  std::vector<Tensor> views(params_.size());
  bucket_of_.assign(params_.size(), 0);
  for (size_t k = 0; k < assignment.size(); ++k) {
    Bucket& b = buckets[k];
    b.params = assignment[k];
    const Tensor& first = params_[b.params.front()];
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (size_t i : b.params) {
      total = aligned_offset(total, first.dtype());
      offsets.push_back(total);
      total += params_[i].numel();
    }
    b.buffer = zeros({total}, first.dtype(), first.device());
    for (size_t j = 0; j < b.params.size(); ++j) {
      const size_t i = b.params[j];
      views[i] = b.buffer.narrow(0, offsets[j], params_[i].numel()).view(params_[i].shape());
      bucket_of_[i] = k;
    }
    b.event.name = "bucket " + std::to_string(k);
    b.event.index = static_cast<int>(k);
    b.event.bytes = total * static_cast<int64_t>(dtype_size(first.dtype()));
  }
  // Gradients already there (a model trained before, or the buckets being rebuilt) move in;
  // later ones are computed there (Note [Gradient buffers] in framework/autograd.h).
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    set_grad_buffer(params_[i], views[i]);
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    views[i].copy_(g);
    params_[i].set_grad(views[i]);
  }
  buckets_ = std::move(buckets);
  views_ = std::move(views);
  assignment_ = std::move(assignment);
}

Tensor Reducer::prepare_for_backward(const Tensor& output, bool sync) {
  RF_CHECK(output.defined(), "DistributedDataParallel: the module returned an undefined tensor");
  armed_ = true;
  sync_ = sync;
  finalize_queued_ = false;
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  deferring_ = sync && options_.rebuild_buckets && !rebuilt_;
  stats_ = {};
  stats_.synchronized = sync;
  reset_buckets();

  unreachable_.clear();
  if (sync && options_.find_unused_parameters) {
    // Every node the output's backward can reach; a parameter whose AccumulateGrad is not
    // among them gets no gradient in this backward.
    std::unordered_set<const Node*> seen;
    std::vector<const Node*> stack;
    if (output.grad_fn()) {
      stack.push_back(output.grad_fn().get());
      seen.insert(stack.back());
    }
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      }
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto acc = params_[i].impl()->meta().grad_accumulator.lock();
      if (!acc || !seen.count(acc.get())) unreachable_.push_back(i);
    }
  }

  if (!grad_needed({output})) return output;  // no backward will come through it
  Tensor wrapped = output.detach();
  std::weak_ptr<Reducer> weak = weak_from_this();
  record("DistributedDataParallel", {output}, wrapped,
         [weak](const Tensor& grad) -> std::vector<Tensor> {
           if (auto self = weak.lock()) self->on_backward_start();
           return {grad};
         });
  return wrapped;
}

void Reducer::reset_buckets() {
  stats_.buckets = static_cast<int>(buckets_.size());
  stats_.gradient_bytes = 0;
  for (Bucket& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.reduction = {};
    CommEvent fresh;
    fresh.name = b.event.name;
    fresh.index = b.event.index;
    fresh.bytes = b.event.bytes;
    b.event = fresh;
    stats_.gradient_bytes += b.event.bytes;
  }
}

void Reducer::queue_finalize() {
  if (finalize_queued_) return;
  finalize_queued_ = true;
  std::weak_ptr<Reducer> weak = weak_from_this();
  queue_callback([weak] {
    if (auto self = weak.lock()) self->finalize();
  });
}

void Reducer::on_backward_start() {
  if (!armed_) {
    throw std::logic_error(
        "DistributedDataParallel: a second backward through one forward's output (retain_graph); "
        "its gradients were already reduced. Run forward again before each backward");
  }
  if (stats_.backward_start == Clock::time_point{}) stats_.backward_start = Clock::now();
  queue_finalize();
  if (!sync_) return;
  for (size_t i : unreachable_) {
    if (ready_[i]) continue;
    ensure_in_bucket(i);
    ++stats_.unused_parameters;
    mark_ready(i);
  }
  unreachable_.clear();
}

void Reducer::on_grad_ready(size_t i) {
  ensure_in_bucket(i);
  if (!armed_) return;  // a backward that does not go through DDP's output
  queue_finalize();     // also when the loss reaches this parameter outside the module
  if (recording_order_) ready_order_.push_back(i);
  if (!sync_) return;
  if (ready_[i]) {
    throw std::logic_error(cat(
        "DistributedDataParallel: parameter '", names_[i], "' got a gradient after it was "
        "reduced as unused (find_unused_parameters): the module's output does not reach it, "
        "but the loss does; compute the loss from the module's output only"));
  }
  mark_ready(i);
}

void Reducer::ensure_in_bucket(size_t i) {
  Tensor& view = views_[i];
  const Tensor g = params_[i].grad();
  if (g.defined() && g.impl() == view.impl()) return;
  NoGradGuard no_grad;
  if (g.defined()) {
    view.copy_(g);
  } else {
    view.zero_();
  }
  params_[i].set_grad(view);
}

void Reducer::mark_ready(size_t i) {
  ready_[i] = true;
  Bucket& b = buckets_[bucket_of_[i]];
  if (--b.pending == 0) {
    b.event.ready = Clock::now();
    if (deferring_) return;
    if (bucket_of_[i] != next_launch_) ++stats_.held_back;
    launch_ready_buckets();
  }
}

void Reducer::launch_ready_buckets() {
  if (deferring_) return;
  CollectiveOptions o;
  o.algorithm = options_.algorithm;
  o.timeout = options_.timeout;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.event.launched = Clock::now();
    b.reduction = options_.comm_hook->launch(*pg_, b.buffer, o);
  }
}

void Reducer::finalize() {
  if (!armed_) return;
  struct Disarm {
    Reducer* r;
    ~Disarm() {
      r->armed_ = false;
      r->finalize_queued_ = false;
      r->recording_order_ = false;
      r->deferring_ = false;
    }
  } disarm{this};
  if (!sync_) {
    stats_.backward_end = Clock::now();
    return;
  }
  const auto start = Clock::now();
  stats_.wait_start = start;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    ensure_in_bucket(i);
    ++stats_.unused_parameters;
    mark_ready(i);
  }
  const bool rebuilding = deferring_;
  if (rebuilding) {  // Note [DDP reducer], "Rebuilding": reduced in the rebuilt buckets
    rebuild();
    deferring_ = false;
    reset_buckets();
    const auto now = Clock::now();
    for (Bucket& b : buckets_) {
      b.pending = 0;
      b.event.ready = now;
    }
    launch_ready_buckets();
  }
  for (Bucket& b : buckets_) {
    b.reduction.wait();
    b.event.add(*b.reduction.work);
    b.event.model = b.reduction.model;
    stats_.traffic += b.event.traffic;
    stats_.model += b.event.model;
    stats_.comm_ms += b.event.ms();
    stats_.events.push_back(b.event);
    b.reduction = {};  // frees what the hook kept (fp16: the compressed copy)
  }
  stats_.backward_end = Clock::now();
  stats_.wait_ms = ms_between(start, stats_.backward_end);
  if (!rebuilding && tuner_ && !tuner_->done()) {
    tune(ms_between(stats_.backward_start, stats_.backward_end));
  }
}

void Reducer::rebuild() {
  rebuilt_ = true;
  const size_t n = params_.size();
  std::vector<size_t> order;
  std::vector<bool> placed(n, false);
  for (size_t i : ready_order_) {
    if (!placed[i]) {
      placed[i] = true;
      order.push_back(i);
    }
  }
  for (size_t k = n; k-- > 0;) {
    if (!placed[k]) order.push_back(k);  // never ready: reverse registration order
  }
  ready_order_.clear();
  ready_order_.shrink_to_fit();

  Tensor t = empty({static_cast<int64_t>(n)}, DType::i64);
  for (size_t k = 0; k < n; ++k) t.data<int64_t>()[k] = static_cast<int64_t>(order[k]);
  CollectiveOptions o;
  o.root = 0;
  o.timeout = options_.timeout;
  // On the parameters' device: a group of GPU tensors (NCCL) takes no CPU tensor.
  t = t.to(params_.empty() ? Device::cpu() : params_[0].device());
  pg_->broadcast(t, o)->wait();
  t = t.to(Device::cpu());
  for (size_t k = 0; k < n; ++k) order[k] = static_cast<size_t>(t.data<int64_t>()[k]);
  order_ = std::move(order);
  rebucket();
}

void Reducer::rebucket() {
  auto assignment = assign_buckets(bucket_tensors(params_), order_, caps_);
  if (assignment != assignment_) build_buckets(std::move(assignment));
}

// Every rank records the same iterations, so every rank reaches each round's end together;
// the slowest rank's medians make every rank's choice the same.
void Reducer::tune(double ms) {
  const BucketCaps before = tuner_->current();
  if (tuner_->record(ms)) {
    const std::vector<double> mine = tuner_->round_medians();
    Tensor t = empty({static_cast<int64_t>(mine.size())}, DType::f64);
    std::copy(mine.begin(), mine.end(), t.data<double>());
    CollectiveOptions o;
    o.op = ReduceOp::max;
    o.timeout = options_.timeout;
    t = t.to(params_.empty() ? Device::cpu() : params_[0].device());
    pg_->allreduce(t, o)->wait();
    t = t.to(Device::cpu());
    tuner_->agree(std::vector<double>(t.data<double>(), t.data<double>() + t.numel()));
  }
  const BucketCaps now = tuner_->current();
  if (now == before) return;
  caps_ = now.bytes();
  rebucket();
}

}  // namespace ringflow::comm
