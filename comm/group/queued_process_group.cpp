#include "ringflow/comm/group/queued_process_group.h"

#include <pthread.h>

#include <cstring>
#include <utility>

#include "ringflow/comm/base/cpu_affinity.h"
#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

QueuedProcessGroup::QueuedProcessGroup(int rank, int size, bool checking, bool stage_cuda)
    : host_of_(static_cast<size_t>(size), 0), rank_(rank), size_(size), checking_(checking),
      stage_cuda_(stage_cuda) {}

void QueuedProcessGroup::set_hosts(std::vector<int> host_of) {
  RF_CHECK(static_cast<int>(host_of.size()) == size_, "set_hosts: ", host_of.size(),
           " hosts for ", size_, " ranks");
  host_of_ = std::move(host_of);
}

namespace {

// Several hosts, and ranks that share one: where the hierarchical allreduce keeps the
// traffic of a host's ranks off the links.
bool shared_and_spread(const std::vector<int>& host_of) {
  std::vector<int> per_host(host_of.size(), 0);
  int hosts = 0;
  bool shared = false;
  for (int h : host_of) {
    hosts += per_host[static_cast<size_t>(h)]++ == 0;
    shared = shared || per_host[static_cast<size_t>(h)] > 1;
  }
  return shared && hosts > 1;
}

}  // namespace

Algorithm QueuedProcessGroup::resolve_allreduce(size_t bytes, Algorithm algo) const {
  const Algorithm flat = ProcessGroup::resolve_allreduce(bytes, algo);
  // Large messages only: below the ring's threshold latency, not bandwidth, decides.
  if (algo == Algorithm::automatic && flat == Algorithm::ring && shared_and_spread(host_of_))
    return Algorithm::hierarchical;
  return flat;
}

Traffic QueuedProcessGroup::allreduce_traffic_model(int64_t count, DType dtype, Algorithm algo) const {
  const size_t elem = dtype_size(dtype);
  if (resolve_allreduce(static_cast<size_t>(count) * elem, algo) == Algorithm::hierarchical)
    return hierarchical_traffic(count, elem, host_of_, rank());
  return ProcessGroup::allreduce_traffic_model(count, dtype, algo);
}

QueuedProcessGroup::~QueuedProcessGroup() { stop(); }

void QueuedProcessGroup::start() {
  thread_ = std::thread([this] { run_loop(); });
  // Named as PyTorch names its threads, so that top -H, perf and /proc tell it apart.
  pthread_setname_np(thread_.native_handle(), "rf_comm");
  const int err = pthread_getcpuclockid(thread_.native_handle(), &thread_clock_);
  RF_CHECK(err == 0, "pthread_getcpuclockid of the communication thread: ", std::strerror(err));
}

std::chrono::nanoseconds QueuedProcessGroup::comm_thread_cpu_time() const {
  timespec t{};
  if (!thread_.joinable() || clock_gettime(thread_clock_, &t) != 0) return {};
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
}

std::vector<int> QueuedProcessGroup::comm_thread_cpus() {
  RF_CHECK(thread_.joinable(), "comm_thread_cpus: the communication thread has stopped");
  return thread_cpus(thread_.native_handle());
}

void QueuedProcessGroup::set_comm_thread_cpus(const std::vector<int>& cpus) {
  RF_CHECK(thread_.joinable(), "set_comm_thread_cpus: the communication thread has stopped");
  set_thread_cpus(thread_.native_handle(), cpus,
                  cat("rank ", rank_, "'s communication thread"));
}

void QueuedProcessGroup::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  thread_.join();
  if (!broken_reason().empty()) staging_.leak();  // the backend may still write into it
}

std::string QueuedProcessGroup::broken_reason() const {
  std::lock_guard lock(mutex_);
  return broken_;
}

void QueuedProcessGroup::mark_broken(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (broken_.empty()) broken_ = reason;
  }
  // The peers hear that this rank gave up, so that its exit is not taken for the cause.
  if (peers_) peers_->give_up();
}


std::string QueuedProcessGroup::describe(const Fingerprint& fp) {
  return describe_collective(static_cast<CollectiveKind>(fp.kind), fp.seq,
                             static_cast<DType>(fp.dtype), fp.count, static_cast<ReduceOp>(fp.op),
                             static_cast<Algorithm>(fp.algorithm), fp.root);
}

QueuedProcessGroup::Fingerprint QueuedProcessGroup::make_fp(CollectiveKind kind, DType dtype,
                                                            int64_t count,
                                                            const CollectiveOptions& o) {
  Fingerprint fp;
  fp.kind = static_cast<int32_t>(kind);
  fp.dtype = static_cast<int32_t>(dtype);
  fp.count = count;
  fp.root = rooted(kind) ? o.root : 0;
  fp.op = reduces(kind) ? static_cast<int32_t>(o.op) : 0;
  return fp;
}

// The sequence number is taken under the queue's lock, so that numbers follow queue order
// even when several threads issue (the order across ranks is then the caller's problem).
std::shared_ptr<Work> QueuedProcessGroup::enqueue(
    std::shared_ptr<Op> op, const std::function<std::string(int64_t)>& describe_op) {
  // Note [CUDA tensors over host groups]: the copies wait for this event, not the stream.
  for (const CollectiveArg& a : op->args) {
    if (!a.staged()) continue;
    op->inputs_ready.record(a.tensor.device());
    break;
  }
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(mutex_);
    int64_t& counter = op->collective ? next_seq_ : next_p2p_;
    op->fp.seq = counter++;
    work = op->work = std::make_shared<Work>(describe_op(op->fp.seq), waiters_);
    queue_.push_back(std::move(op));
  }
  queue_cv_.notify_one();
  return work;
}

std::shared_ptr<Work> QueuedProcessGroup::enqueue_collective(Fingerprint fp,
                                                             const CollectiveOptions& options,
                                                             std::vector<CollectiveArg> args,
                                                             std::function<void(Op&)> body) {
  auto op = std::make_shared<Op>();
  op->fp = fp;
  op->timeout = options.timeout;
  op->args = std::move(args);
  op->body = std::move(body);
  return enqueue(std::move(op), [&](int64_t seq) {
    fp.seq = seq;
    return describe(fp);
  });
}

std::shared_ptr<Work> QueuedProcessGroup::enqueue_p2p(
    std::shared_ptr<Op> op, const std::function<std::string(int64_t)>& describe_op) {
  op->collective = false;
  return enqueue(std::move(op), describe_op);
}

void QueuedProcessGroup::run_loop() {
  for (;;) {
    std::shared_ptr<Op> op;
    {
      // Asleep until a collective is queued: no spinning for the next one, whose wake-up
      // costs microseconds, while the computation that queues it needs the cores.
      std::unique_lock lock(mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    const bool was_broken = !broken_reason().empty();
    run(*op);
    if (!was_broken && !broken_reason().empty()) {
      // The backend may still write into this collective's tensors (MPI cannot cancel a
      // collective): keep them alive for the rest of the process, deliberately leaked.
      static std::mutex leaked_mutex;
      static auto* leaked = new std::vector<std::shared_ptr<Op>>();
      std::lock_guard lock(leaked_mutex);
      leaked->push_back(std::move(op));
    }
  }
}

void QueuedProcessGroup::run(Op& op) {
  Work& work = *op.work;
  const std::string broken = broken_reason();
  if (!broken.empty()) {
    work.finish(std::make_exception_ptr(CommError(
        cat(work.description(), " on rank ", rank_, ": not started, the process group is "
            "unusable since ", broken))));
    return;
  }
  op.deadline = Clock::now() + op.timeout;
  work.mark_started();
  if (peers_ && op.collective) peers_->arrive(op.fp.seq);
  try {
    if (checking_ && op.collective && size_ > 1) check_fingerprints(op);
  } catch (const std::exception& e) {
    // A mismatch leaves the group usable: every rank sees it, none has started. A rank
    // that did not arrive (the exchange timed out) broke it.
    if (broken_reason().empty()) work.finish(std::current_exception());
    else fail(op, e, std::current_exception());
    return;
  }
  try {
    work.set_status("running");
    if (stage_cuda_) staging_.stage_in(op.args, work, op.inputs_ready);
    op.body(op);
    if (stage_cuda_) staging_.stage_out(op.args, work, op.inputs_ready);
    work.finish();
  } catch (const std::exception& e) {
    // Failed part-way: the other ranks may be anywhere in it, so the group is broken.
    fail(op, e, std::current_exception());
  }
}

void QueuedProcessGroup::fail(Op& op, const std::exception& e, std::exception_ptr thrown) {
  const std::string why = with_dead_peers(e.what(), op);
  mark_broken(cat(op.work->description(), " failed on rank ", rank_, ": ", why));
  op.work->finish(why == e.what() ? thrown : std::make_exception_ptr(CommError(why)));
}

std::string QueuedProcessGroup::with_dead_peers(const std::string& what, const Op& op) {
  if (!peers_) return what;
  // Asking every rank where it is also gives their links' ends the time to be read; only a
  // stopped or hung rank makes it wait, up to PeerWatch's patience.
  const std::string absent = op.collective ? peers_->absent_from(op.fp.seq) : "";
  std::string dead = dead_peers();
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (dead.empty() && absent.empty() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    dead = dead_peers();
  }
  const std::string named = dead.empty() ? absent : dead;
  if (named.empty() || what.find(named) != std::string::npos) return what;
  return cat(what, "; ", named);
}

void QueuedProcessGroup::check_fingerprints(Op& op) {
  op.work->set_status("exchanging fingerprints");
  const std::vector<Fingerprint> theirs = exchange_fingerprints(op);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || theirs[peer] == op.fp) continue;
    throw CommError(cat("collective mismatch detected on rank ", rank_, ": rank ", rank_,
                        " issued ", describe(op.fp), " but rank ", peer, " issued ",
                        describe(theirs[peer]),
                        "; every rank must issue the same collectives in the same order"));
  }
}

}  // namespace ringflow::comm
