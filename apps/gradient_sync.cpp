#include "ringflow/apps/gradient_sync.h"

#include <chrono>
#include <optional>
#include <stdexcept>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/ops.h"

namespace ringflow::apps {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

constexpr SyncMode kModes[] = {SyncMode::none, SyncMode::gather_scatter, SyncMode::allreduce,
                               SyncMode::ddp, SyncMode::fedavg};

}  // namespace

const char* sync_mode_name(SyncMode mode) {
  switch (mode) {
    case SyncMode::none: return "none";
    case SyncMode::gather_scatter: return "gather-scatter";
    case SyncMode::allreduce: return "allreduce";
    case SyncMode::ddp: return "ddp";
    case SyncMode::fedavg: return "fedavg";
  }
  return "?";
}

SyncMode sync_mode_from_name(const std::string& name) {
  for (SyncMode m : kModes) {
    if (name == sync_mode_name(m)) return m;
  }
  throw std::invalid_argument("unknown --sync '" + name +
                              "' (choices: none, gather-scatter, allreduce, ddp, fedavg)");
}

GradientSync::GradientSync(nn::ModulePtr model, std::shared_ptr<comm::ProcessGroup> pg,
                           SyncOptions options)
    : model_(std::move(model)), pg_(std::move(pg)), options_(std::move(options)) {
  if (options_.mode == SyncMode::none) return;
  RF_CHECK(pg_, "--sync ", sync_mode_name(options_.mode), " needs a process group");
  for (const auto& [name, p] : model_->named_parameters()) names_.push_back(name);
  if (options_.mode == SyncMode::ddp) {
    comm::DdpOptions o;
    o.bucket_cap_mb = options_.bucket_cap_mb;
    o.tune_bucket_caps = options_.tune_bucket_caps;
    o.find_unused_parameters = options_.find_unused_parameters;
    o.algorithm = options_.algorithm;
    o.timeout = options_.timeout;
    o.comm_hook = comm::make_comm_hook(options_.comm_hook);
    ddp_ = std::make_unique<comm::DistributedDataParallel>(model_, pg_, o);
    return;
  }
  // The same starting point everywhere (the seeds agree, but a resumed or hand-made model
  // need not).
  std::vector<Tensor> state = model_->parameters();
  for (const Tensor& b : model_->buffers()) state.push_back(b);
  comm::broadcast_coalesced(*pg_, state, /*root=*/0, options_.timeout);
}

Tensor GradientSync::forward(const Tensor& x, bool last) {
  if (!ddp_) return model_->forward(x);
  std::optional<comm::DistributedDataParallel::NoSync> no_sync;
  if (!last) no_sync.emplace(*ddp_);
  Tensor y = ddp_->forward(x);
  const comm::DdpStats st = ddp_->stats();
  step_.traffic += st.broadcast.traffic;
  step_.model += st.broadcast.model;
  step_.comm_ms += st.broadcast_ms();
  step_.forward_wait_ms += st.broadcast_ms();
  if (st.broadcast.started != Clock::time_point{}) {
    // The training thread waits for the whole broadcast: the wait is the event.
    step_.events.push_back(st.broadcast);
    step_.waits.push_back({"buffer broadcast", st.broadcast.started, st.broadcast.finished});
  }
  return y;
}

void GradientSync::after_backward(bool last) {
  if (ddp_) {
    record_ddp_backward();
  } else if (options_.mode != SyncMode::none && options_.mode != SyncMode::fedavg && last &&
             options_.comm_hook != "noop") {  // allreduce's noop: gradients stay local
    average_each_gradient();
  }
}

// ddp reduced its buckets during backward: their events, and the training thread's wait at
// the end of backward for the last of them.
void GradientSync::record_ddp_backward() {
  const comm::DdpStats st = ddp_->stats();
  step_.traffic += st.backward.traffic;
  step_.model += st.backward.model;
  step_.comm_ms += st.backward.comm_ms;
  step_.backward_wait_ms += st.backward.wait_ms;
  if (st.backward.synchronized) {
    step_.events.insert(step_.events.end(), st.backward.events.begin(), st.backward.events.end());
    step_.waits.push_back({"end of backward", st.backward.wait_start, st.backward.backward_end});
  }
}

namespace {

// p's gradient as the group takes it, set back on p: every rank reduces every parameter in
// the same order, so an unused one sends zeros; channels-last weight gradients made dense.
Tensor dense_grad(Tensor& p) {
  Tensor g = p.grad();
  if (!g.defined()) {
    g = zeros_like(p);
  } else if (!g.is_contiguous()) {
    NoGradGuard no_grad;
    g = g.contiguous();
  }
  p.set_grad(g);
  return g;
}

// One gradient's collectives in flight: an allreduce, or a reduce then a broadcast.
struct Pending {
  CommEvent event;
  std::vector<std::shared_ptr<comm::Work>> works;
};

}  // namespace

// gather-scatter and allreduce: every gradient averaged on its own, all issued, then all
// waited for. gather-scatter by the group's collectives is a reduce to rank 0, then a
// broadcast back (queued together: a group runs them in issue order, process_group.h).
void GradientSync::average_each_gradient() {
  const auto start = Clock::now();
  const bool gather_scatter = options_.mode == SyncMode::gather_scatter;
  const bool by_collectives = gather_scatter && (options_.gather_scatter_by_collectives ||
                                                 pg_->backend_name() == "nccl");
  comm::CollectiveOptions o;
  o.op = comm::ReduceOp::avg;
  o.algorithm = !gather_scatter ? options_.algorithm
                : by_collectives ? comm::Algorithm::automatic : comm::Algorithm::naive;
  o.root = 0;
  o.timeout = options_.timeout;
  std::vector<Pending> pending;
  std::vector<Tensor> params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].requires_grad()) continue;
    Tensor g = dense_grad(params[i]);
    Pending& q = pending.emplace_back();
    q.event.name = names_[i];
    q.event.index = static_cast<int>(i);
    q.event.bytes = g.numel() * static_cast<int64_t>(dtype_size(g.dtype()));
    q.event.ready = q.event.launched = Clock::now();
    if (by_collectives) {
      q.event.collective = "reduce+broadcast";
      q.works = {pg_->reduce(g, o), pg_->broadcast(g, o)};
      q.event.model = comm::reduce_broadcast_traffic(q.event.bytes, pg_->size(), pg_->rank(), o.root);
    } else {
      q.works = {pg_->allreduce(g, o)};
      q.event.model = pg_->allreduce_traffic_model(g.numel(), g.dtype(), o.algorithm);
    }
  }
  for (Pending& q : pending) {
    for (const auto& w : q.works) {
      w->wait();
      step_.traffic += w->traffic();
      step_.comm_ms += ms_between(w->start_time(), w->end_time());
      q.event.add(*w);
    }
  }
  const auto end = Clock::now();
  step_.after_wait_ms += ms_between(start, end);
  step_.waits.push_back({"after backward", start, end});
  for (Pending& q : pending) {
    step_.model += q.event.model;
    step_.events.push_back(std::move(q.event));
  }
}

bool GradientSync::after_step(int64_t samples) {
  if (options_.mode != SyncMode::fedavg) return false;
  ++round_steps_;
  round_samples_ += static_cast<double>(samples);
  if (options_.local_steps == 0 || round_steps_ < options_.local_steps) return false;
  average_models();
  return true;
}

bool GradientSync::end_of_epoch(int64_t epoch, bool last) {
  if (options_.mode != SyncMode::fedavg) return false;
  const bool due = options_.local_steps > 0 ? round_steps_ > 0
                                            : epoch % options_.local_epochs == 0 || last;
  if (!due) return false;
  average_models();
  return true;
}

void GradientSync::average_models() {
  const auto start = Clock::now();
  const CommEvent e = comm::average_model(
      *model_, *pg_, round_samples_,
      {.topology = options_.topology, .algorithm = options_.algorithm, .wire = options_.wire,
       .timeout = options_.timeout});
  const auto end = Clock::now();
  step_.traffic += e.traffic;
  step_.model += e.model;
  step_.comm_ms += e.ms();
  step_.after_wait_ms += ms_between(start, end);
  step_.waits.push_back({"model average", start, end});
  step_.events.push_back(e);
  ++step_.rounds;
  round_steps_ = 0;
  round_samples_ = 0;
}

// ddp too: its buckets are the gradients' buffers, which the next backward writes into
// (Note [Gradient buffers] in framework/autograd.h) without zeroing them first.
void GradientSync::zero_grad(optim::Optimizer& optimizer) {
  optimizer.zero_grad(/*set_to_none=*/true);
}

StepComm& StepComm::operator+=(const StepComm& o) {
  traffic += o.traffic;
  model += o.model;
  rounds += o.rounds;
  comm_ms += o.comm_ms;
  forward_wait_ms += o.forward_wait_ms;
  backward_wait_ms += o.backward_wait_ms;
  after_wait_ms += o.after_wait_ms;
  events.insert(events.end(), o.events.begin(), o.events.end());
  waits.insert(waits.end(), o.waits.begin(), o.waits.end());
  return *this;
}

StepComm GradientSync::take() {
  StepComm s = step_;
  step_ = {};
  return s;
}

}  // namespace ringflow::apps
