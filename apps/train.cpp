// train: training of a registered model on Fashion-MNIST, CIFAR-10 or a synthetic data set,
// alone or data-parallel (--sync gather-scatter|allreduce|ddp, see apps/gradient_sync.h) with
// ranks started by mpiexec, srun or torchrun's variables (--launcher), with per-phase timings
// (data wait, forward, backward, exposed communication, optimizer), bytes and overlap,
// test-set evaluation, checkpoints (every epoch and every N iterations) and --resume (a file, or
// auto: the newest; apps/checkpointing.h), JSON-lines metrics for plots and a Chrome
// trace per rank (--trace, apps/trace.h). Each rank trains on its DistributedSampler share;
// rank 0 alone prints, evaluates and writes checkpoints and metrics, and every rank can
// resume from them. Made of: the flags (train_flags.h), the set-up (setup.h), one step that
// returns one record and the epochs that aggregate them (here), the reports (report.h).
// With no flags: the small CNN on Debian's Fashion-MNIST, one process (what `./dev demo` runs).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ringflow/apps/checkpointing.h"
#include "ringflow/apps/data_choice.h"
#include "ringflow/apps/gradient_sync.h"
#include "ringflow/apps/node_softirq.h"
#include "ringflow/apps/non_finite.h"
#include "ringflow/apps/report.h"
#include "ringflow/apps/setup.h"
#include "ringflow/apps/step_memory.h"
#include "ringflow/apps/trace.h"
#include "ringflow/apps/train_flags.h"
#include "ringflow/comm/base/build_info.h"
#include "ringflow/comm/base/cpu_affinity.h"
#include "ringflow/comm/bootstrap/rank_supervisor.h"
#include "ringflow/comm/group/device_choice.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/models/registry.h"

namespace ringflow::apps {
namespace {

struct Evaluation {
  double loss;
  int64_t correct, total, skipped;
};

// --skip-bad-images: each image the loader dropped from a batch, named on stderr.
int64_t report_skipped(const data::Batch& b) {
  for (const std::string& why : b.skipped) fmt::print(stderr, "train: skipped a bad image: {}\n", why);
  return static_cast<int64_t>(b.skipped.size());
}

Evaluation evaluate(nn::Module& model, data::DataLoader& loader, data::BatchToDevice& to_device,
                    double label_smoothing) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation e{0, 0, 0, 0};
  for (const data::Batch& host_batch : loader.epoch(0)) {
    e.skipped += report_skipped(host_batch);
    const data::Batch b = to_device(host_batch);
    const Tensor logits = model(b.images);
    e.loss += cross_entropy(logits, b.labels, Reduction::sum, label_smoothing).item();
    e.correct += static_cast<int64_t>(sum(eq(argmax(logits, 1), b.labels)).item());
    e.total += b.labels.numel();
  }
  model.train();
  return e;
}


// One iteration on the trace (apps/trace.h): on the compute track the iteration, each
// micro-batch's data wait, forward and backward, the waits for communication (nested in
// forward and backward where they happen there) and the optimizer step; on the comm track
// each collective, with an arrow from its launch.
void trace_step(TraceWriter& trace, int64_t epoch, int64_t step, int64_t global_iteration,
                Clock::time_point start, const std::vector<std::array<Clock::time_point, 5>>& marks,
                Clock::time_point optimizer_start, Clock::time_point end, const StepComm& c) {
  trace.span(Track::compute, "iteration", "iteration", start, end,
             {{"epoch", epoch}, {"iteration", step}, {"global_iteration", global_iteration},
              {"micro_batches", marks.size()}});
  for (size_t k = 0; k < marks.size(); ++k) {
    const auto& t = marks[k];
    const nlohmann::json args = marks.size() > 1 ? nlohmann::json{{"micro_batch", k}}
                                                 : nlohmann::json::object();
    trace.span(Track::compute, "data wait", "compute", t[0], t[1], args);
    trace.span(Track::compute, "forward", "compute", t[1], t[2], args);
    trace.span(Track::compute, "backward", "compute", t[2], t[3], args);
  }
  for (const CommWait& w : c.waits) {
    trace.span(Track::compute, "comm wait", "wait", w.begin, w.end, {{"what", w.what}});
  }
  trace.span(Track::compute, "optimizer", "compute", optimizer_start, end);
  for (const CommEvent& e : c.events) {
    const std::string name = std::string(e.collective) + " " + e.name;
    trace.span(Track::comm, name, "comm", e.started, e.finished,
               {{"index", e.index}, {"bytes", e.bytes}, {"sent", e.traffic.sent},
                {"received", e.traffic.received},
                {"queued_us", std::chrono::duration<double, std::micro>(e.started - e.launched).count()},
                {"global_iteration", global_iteration}});
    if (e.started > e.launched) trace.flow(name, Track::compute, e.launched, Track::comm, e.started);
  }
}

// The device allocator's peak of tensor bytes since its last reset (the epoch's start).
double peak_tensor_bytes(Device device) {
  return static_cast<double>(device.is_cuda() ? cuda_memory_stats(device.index).peak_allocated
                                              : cpu_allocator_stats().peak_allocated);
}

void reset_peak_tensor_bytes(Device device) {
  if (device.is_cuda()) cuda_reset_peak_memory_stats(device.index);
  else cpu_allocator_reset_peak();
}

// One iteration as this rank ran it: what the epoch aggregates, and the times the trace draws.
struct StepRecord {
  Values figures{step_metrics().schema};
  bool ran_out = false;  // the loader ran dry before the step was whole
  Clock::time_point start, optimizer_start, end;
  // Per micro-batch: before loading, forward, backward, after_backward, and its end.
  std::vector<std::array<Clock::time_point, 5>> marks;
  StepComm comm;
};

// One run: made from the flags (collective under a launcher), then trained epoch by epoch.
class Trainer {
 public:
  // arguments: the command line, for the metrics header.
  Trainer(const Flags& f, std::vector<std::string> arguments);
  void run();

 private:
  void write_metrics_header();
  void load_weights_flag();
  void report_test_set(nlohmann::json& j) const;
  void evaluate_only();
  void export_weights();
  void clip_gradients();
  std::string progress(int64_t epoch, int64_t step) const;
  void print_epoch_speed(int64_t epoch, const AcrossRanks& a, int64_t steps) const;
  void set_threads_and_batch();
  void place_threads();
  std::chrono::nanoseconds comm_cpu_time() const;
  void check_memory();
  void make_data_and_model();
  void resume();
  void set_steps();
  void print_header() const;
  StepRecord step();
  Tensor forward_and_loss(const Tensor& images, const Tensor& labels, bool last, Tensor& loss);
  void make_graphed_step();
  bool graphed();
  EpochStats train_epoch(int64_t epoch);
  void log_iteration(EpochStats& s, int64_t epoch, int64_t step, const StepRecord& r);
  void report_bucket_tuning();
  void write_iterations(int64_t epoch, const std::vector<AcrossRanks::Iteration>& logged);
  void finish_epoch(int64_t epoch, const EpochStats& s);
  void checkpoint_in_epoch(int64_t epoch, EpochStats& s);
  void checkpoint(int64_t epoch, const EpochProgress& progress);
  void check_loaded_finite(const std::string& what) const;

  const Flags f_;
  const SyncMode mode_;
  const comm::Timeout comm_timeout_;
  const Setup setup_;
  comm::ProcessGroup* const pg_;  // null: one process
  const int world_, rank_;
  const bool lead_;  // prints, evaluates, writes checkpoints and metrics
  const bool chatty_;  // lead_, and not --quiet: prints more than results
  int64_t local_batch_ = 0, global_batch_ = 0, steps_ = 0;
  nn::ModulePtr model_;
  Data data_;
  std::unique_ptr<data::BatchToDevice> to_device_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  std::unique_ptr<optim::GradScaler> scaler_;  // --precision fp16: dynamic loss scaling
  std::unique_ptr<NonFiniteGuard> guard_;       // --on-nonfinite
  std::map<std::string, std::string> info_;  // the checkpoints' metadata
  const std::vector<std::string> arguments_;
  int64_t skipped_ = 0;  // --skip-bad-images: images this rank skipped in this epoch
  TrainingPosition pos_;
  std::unique_ptr<Checkpointer> checkpoints_;
  EpochProgress resumed_progress_;  // this rank's, where the run resumed inside an epoch
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<TraceWriter> trace_;
  bool tty_ = false;
  Clock::time_point epoch_start_;  // of the epoch being trained, for the progress line
  int64_t epoch_first_ = 0;        // ... and its first iteration (not 0 when resumed inside it)
  bool tuning_reported_ = false;
  std::string placement_;       // --comm-thread-cpu: what this rank did, for the header
  data::Batch batch_;           // reused from step to step
  // --cuda-graphs: the captured forward and backward, its inputs and what it computed.
  static constexpr int kGraphWarmup = 3;  // eager steps first: cuDNN's searches, the optimizer's state
  bool graph_tried_ = false;
  std::unique_ptr<GraphedStep> graphed_;
  Tensor graph_images_, graph_labels_, graph_logits_, graph_loss_;
  double window_loss_ = 0;      // this rank's loss since the last logged iteration
  int64_t window_ = 0;
};

Trainer::Trainer(const Flags& f, std::vector<std::string> arguments)
    : f_(f),
      mode_(f.sync),
      comm_timeout_(static_cast<int64_t>(f.comm_timeout_s * 1000)),
      setup_(set_up(f, mode_, comm_timeout_)),
      pg_(setup_.pg.get()),
      world_(pg_ ? pg_->size() : 1),
      rank_(pg_ ? pg_->rank() : 0),
      lead_(rank_ == 0),
      chatty_(lead_ && !f.quiet),
      info_{{"model", f.model}, {"dataset", flag_name(f.dataset)}, {"optimizer", flag_name(f.optimizer)}},
      arguments_(std::move(arguments)) {
  check_output_paths(f_, rank_, world_);
  set_threads_and_batch();
  place_threads();
  make_data_and_model();
  check_memory();
  set_steps();
  resume();
  // Collective from here on: rank 0's state everywhere.
  sync_ = std::make_unique<GradientSync>(
      model_, setup_.grad_pg,
      SyncOptions{.mode = mode_, .algorithm = f_.algo,
                  .bucket_cap_mb = f_.bucket_cap_mb, .tune_bucket_caps = f_.tune_buckets,
                  .comm_hook = f_.comm_hook,
                  .find_unused_parameters = f_.find_unused, .timeout = comm_timeout_,
                  .local_steps = f_.local_steps, .local_epochs = std::max(1, f_.local_epochs),
                  .topology = f_.fed_topology,
                  .wire = f_.comm_precision});
  print_header();
  metrics_ = std::make_unique<Metrics>(lead_ ? f_.metrics : "");
  write_metrics_header();
  tty_ = chatty_ && ::isatty(STDOUT_FILENO);
  // The origin of every rank's timeline: just after the collective set-up, so that the
  // ranks' traces line up to within a collective's latency.
  trace_ = std::make_unique<TraceWriter>(
      f_.trace.empty() ? "" : trace_path_for_rank(f_.trace, rank_, world_), rank_, Clock::now(),
      nlohmann::json{{"model", f_.model}, {"dataset", flag_name(f_.dataset)}, {"sync", flag_name(f_.sync)},
                     {"algo", flag_name(f_.algo)}, {"world", world_}, {"local_batch", local_batch_}});
}

void Trainer::set_threads_and_batch() {
  int threads = f_.threads;
  if (threads == 0 && pg_) {  // share the machine's cores between its ranks
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / setup_.node.local_size);
  }
  if (threads > 0) set_num_threads(threads);
  set_conv_algorithm(f_.conv_algo);
  set_memory_format(f_.memory_format);
  local_batch_ = f_.batch_size;
  if (f_.global_batch > 0) {
    const int64_t per_step = int64_t{world_} * f_.grad_accum;
    if (f_.global_batch % per_step != 0)
      throw std::invalid_argument(fmt::format(
          "--global-batch {} is not a multiple of {} ranks x --grad-accum {}", f_.global_batch,
          world_, f_.grad_accum));
    local_batch_ = f_.global_batch / per_step;
  }
  global_batch_ = local_batch_ * world_ * f_.grad_accum;
}

// --comm-thread-cpu: the communication threads (both groups' where NCCL carries the
// gradients) on a core of their own, the compute threads (and the loader's, started later)
// on the others (comm/base/cpu_affinity.h).
void Trainer::place_threads() {
  using Kind = CommThreadCpu::Kind;
  if (!pg_ || f_.comm_thread_cpu.kind == Kind::none) return;
  const std::vector<int> cpus = comm::allowed_cpus();
  comm::ThreadPlacement p;
  if (f_.comm_thread_cpu.kind == Kind::automatic) {
    p = comm::place_comm_thread(cpus, setup_.node.local_rank, setup_.node.local_size,
                                num_threads());
  } else {
    p.comm_cpu = f_.comm_thread_cpu.cpu;
    std::copy_if(cpus.begin(), cpus.end(), std::back_inserter(p.compute_cpus),
                 [&](int c) { return c != *p.comm_cpu; });
    p.why = fmt::format("communication thread on CPU {}, compute threads on {}", *p.comm_cpu,
                        comm::cpu_list_text(p.compute_cpus));
  }
  placement_ = p.why;
  if (!p.comm_cpu) return;
  setup_.pg->set_comm_thread_cpus({*p.comm_cpu});
  if (setup_.grad_pg != setup_.pg) setup_.grad_pg->set_comm_thread_cpus({*p.comm_cpu});
  if (!p.compute_cpus.empty()) set_compute_cpus(p.compute_cpus);
}

// What the communication threads have used of the CPUs so far.
std::chrono::nanoseconds Trainer::comm_cpu_time() const {
  if (!pg_) return {};
  std::chrono::nanoseconds t = setup_.pg->comm_thread_cpu_time();
  if (setup_.grad_pg != setup_.pg) t += setup_.grad_pg->comm_thread_cpu_time();
  return t;
}

// Before the first step: on the CPU, the step's measured estimate against what this host has
// for its ranks. Every rank takes part in the decision (a rank on a GPU says "fits"), so
// that all stop when one would not fit instead of the others waiting for it.
void Trainer::check_memory() {
  if (f_.no_memory_check) return;
  double fits = 1;
  std::string why;
  if (setup_.device.device.is_cpu()) {
    const StepMemory m = measure_step_memory(f_.model, f_.precision);
    // The optimizer's momentum, DDP's buckets and the loader's batches in flight come on top.
    const double params = m.parameter_bytes;
    const int64_t image = shape_numel(models::model_input_shape(f_.model)) * 4;
    const double need = m.at(local_batch_) + (f_.momentum != 0 ? params : 0) +
                        (mode_ == SyncMode::none ? 0 : params) +
                        static_cast<double>((f_.workers + 1) * local_batch_ * image);
    try {
      check_step_memory(need, m, local_batch_, setup_.node.local_size, available_host_memory(), f_.model,
                        f_.global_batch > 0 ? fmt::format("--global-batch {}", f_.global_batch)
                                            : fmt::format("--batch-size {}", f_.batch_size));
    } catch (const std::invalid_argument& e) {
      fits = 0;
      why = e.what();
    }
  }
  if (min_over_ranks(fits, pg_, comm_timeout_) == 1) return;
  throw std::invalid_argument(
      !why.empty() ? why
                   : fmt::format("--batch-size {}: another rank's training step does not fit in its "
                                 "host's memory (its message says by how much); lower it, or pass "
                                 "--no-memory-check", f_.batch_size));
}

void Trainer::make_data_and_model() {
  manual_seed(f_.seed);
  const Shape input = models::model_input_shape(f_.model);
  data_ = open_data(f_, input, rank_, world_);  // first: own images give the model its classes
  model_ = models::make_model(f_.model, static_cast<int64_t>(data_.classes.size()));
  load_weights_flag();
  model_->to(setup_.device.device);  // in place: the optimizer and the sync hold the same tensors
  if (!data_.classes.empty()) {
    info_["classes"] = nlohmann::json(data_.classes).dump();
    if (data_.train->image_shape() != input)
      check_model_takes(*model_, f_, data_.train->image_shape(), setup_.device.device);
  }
  to_device_ = std::make_unique<data::BatchToDevice>(setup_.device.device);
  std::shared_ptr<const data::Sampler> sampler;
  const data::Partition& partition = f_.partition;
  if (!partition.iid()) {
    std::vector<std::vector<int64_t>> shares =
        data::dirichlet_partition(*data_.train, world_, partition.dirichlet_alpha, f_.seed);
    sampler = std::make_shared<data::ShardSampler>(std::move(shares[static_cast<size_t>(rank_)]),
                                                   f_.seed + static_cast<uint64_t>(rank_));
  } else if (pg_ && !data_.split_by_rank) {
    sampler = std::make_shared<data::DistributedSampler>(
        data_.train->size(), world_, rank_,
        data::DistributedSamplerOptions{.shuffle = true, .seed = f_.seed});
  }
  const int prefetch = std::max(1, f_.workers) * f_.prefetch_factor;
  train_loader_ = std::make_unique<data::DataLoader>(
      data_.train, data::DataLoaderOptions{.batch_size = local_batch_, .drop_last = true,
                                           .seed = f_.seed, .num_workers = f_.workers,
                                           .prefetch_batches = prefetch,
                                           .transforms = data_.train_transforms, .sampler = sampler,
                                           .skip_bad_examples = f_.skip_bad_images});
  test_loader_ = std::make_unique<data::DataLoader>(
      data_.test, data::DataLoaderOptions{.batch_size = data_.classes.empty() ? 1000 : 100,
                                          .shuffle = false, .num_workers = f_.workers,
                                          .prefetch_batches = prefetch,
                                          .transforms = data_.test_transforms,
                                          .skip_bad_examples = f_.skip_bad_images});
  if (train_loader_->num_batches() < f_.grad_accum)
    throw std::invalid_argument(
        !partition.iid() ? fmt::format("--partition {} gave rank {} {} training images, fewer "
                                       "than one step's {}; raise ALPHA or lower --batch-size",
                                       flag_name(f_.partition), rank_, train_loader_->epoch_size(),
                                       local_batch_ * f_.grad_accum)
        : f_.global_batch > 0 ? fmt::format("--global-batch {} exceeds the {} training images",
                                          f_.global_batch, data_.train->size())
        : world_ == 1 ? fmt::format("--batch-size {} exceeds the {} training images",
                                    local_batch_ * f_.grad_accum, data_.train->size())
                    : fmt::format("a local batch of {} x --grad-accum {} exceeds the {} training "
                                  "images of each rank's share", local_batch_, f_.grad_accum,
                                  train_loader_->epoch_size()));
  optimizer_ = make_optimizer(f_, model_->parameters());
  scheduler_ = std::make_unique<optim::LRScheduler>(*optimizer_, make_schedule(f_));
  if (f_.precision == DType::f16) scaler_ = std::make_unique<optim::GradScaler>();
  guard_ = std::make_unique<NonFiniteGuard>(f_.on_nonfinite, f_.nonfinite_check_every,
                                            /*scaler_checks_grads=*/scaler_ != nullptr);
}

// Optimizer steps per epoch. Unequal shares (--partition dirichlet) train as many steps as
// the smallest on every rank, so that the collectives pair up, except fedavg by
// --local-epochs, which communicates only between epochs: each rank then runs its whole share.
void Trainer::set_steps() {
  steps_ = train_loader_->num_batches() / f_.grad_accum;
  const bool own_pace = mode_ == SyncMode::fedavg && f_.local_steps == 0;
  if (!f_.partition.iid() && !own_pace)
    steps_ = static_cast<int64_t>(min_over_ranks(static_cast<double>(steps_), pg_, comm_timeout_));
  if (f_.max_iters > 0) steps_ = std::min(f_.max_iters, steps_);
}

// Every rank reads the checkpoint (its optimizer state is its own).
void Trainer::resume() {
  checkpoints_ = std::make_unique<Checkpointer>(f_, pg_, comm_timeout_, info_);
  const std::optional<Resumed> r = checkpoints_->resume(*model_, *optimizer_, scaler_.get(), steps_);
  if (!r) return;
  pos_ = r->position;
  resumed_progress_ = r->progress;
  scheduler_->set_epoch(std::min<int64_t>(pos_.epoch, f_.epochs));
  check_loaded_finite(fmt::format("checkpoint '{}'", r->path));
}

// A model read from a file (--resume, --weights) holds no inf or NaN, unless
// --on-nonfinite ignore lets it in.
void Trainer::check_loaded_finite(const std::string& what) const {
  if (f_.on_nonfinite == OnNonFinite::ignore) return;
  const std::string bad = first_non_finite(model_->state_dict());
  if (bad.empty()) return;
  throw std::invalid_argument(fmt::format("{}: tensor '{}' holds inf or NaN (--on-nonfinite ignore "
                                          "loads it all the same)", what, bad));
}

void Trainer::print_header() const {
  if (!chatty_) return;
  const std::string& precision = flag_name(f_.precision);
  fmt::print("{} ({} parameters) on {}: {} training and {} test images; optimizer {}; {} threads; "
             "device {}{}\n", f_.model, model_->num_parameters(), flag_name(f_.dataset),
             data_.train->size(), data_.test->size(), flag_name(f_.optimizer), num_threads(),
             setup_.device.note, f_.precision == DType::f32 ? "" : fmt::format(
                 "; mixed precision {} (f32 master weights)", precision));
  if (!data_.note.empty()) fmt::print("{}: {}\n", f_.data_dir, data_.note);
  const bool widened = f_.precision == DType::f16 || (f_.precision == DType::bf16 && !cpu_native_bf16());
  if (setup_.device.device.is_cpu() && widened)
    fmt::print("{} on the CPU{}: convolutions and matmuls widen to f32 inside the kernels; values "
               "keep {}'s range and rounding, at f32 speed\n", precision,
               f_.precision == DType::bf16 ? " (no AVX512-BF16 here)" : "", precision);
  if (!pg_) return;
  std::string details;
  if (mode_ == SyncMode::ddp) {
    details = fmt::format(", buckets of {}, hook {}",
                          f_.tune_buckets ? "a measured cap (--bucket-cap-mb auto)"
                                          : fmt::format("{} MiB", f_.bucket_cap_mb),
                          flag_name(f_.comm_hook));
  } else if (mode_ == SyncMode::fedavg) {
    details = fmt::format(", models averaged every {} through {} as {}",
                          f_.local_steps > 0 ? fmt::format("{} local steps", f_.local_steps)
                                             : fmt::format("{} local epochs", std::max(1, f_.local_epochs)),
                          flag_name(f_.fed_topology), flag_name(f_.comm_precision));
  }
  if (!f_.partition.iid()) details += fmt::format("; data split {}", flag_name(f_.partition));
  fmt::print("--sync {} on {} ranks: {} images per rank and micro-batch, {} per step (x{} "
             "micro-batches); algorithm {} over {}{}\n", flag_name(f_.sync), world_, local_batch_,
             global_batch_, f_.grad_accum, flag_name(f_.algo),
             setup_.backend == BackendKind::nccl ? "NCCL" : setup_.transport, details);
  fmt::print("ranks started by {}; processes (pid@host) by rank: {}\n", setup_.how,
             fmt::join(setup_.processes, " "));
  if (!placement_.empty())
    fmt::print("--comm-thread-cpu {} on rank 0: {}\n", flag_name(f_.comm_thread_cpu), placement_);
}

// The model's logits for a micro-batch, and its loss (under --precision's autocast).
Tensor Trainer::forward_and_loss(const Tensor& images, const Tensor& labels, bool last, Tensor& loss) {
  std::optional<AutocastGuard> amp;
  if (f_.precision != DType::f32) amp.emplace(f_.precision);
  Tensor logits = sync_->forward(images, last);
  loss = cross_entropy(logits, labels, Reduction::mean, f_.label_smoothing);
  return logits;
}

// What keeps --cuda-graphs from capturing a step, in words; empty when nothing known does.
std::string cuda_graph_blocker(const Flags& f, SyncMode mode) {
  if (mode == SyncMode::ddp) return "--sync ddp reduces the gradients on its communication thread during backward";
  if (f.grad_accum > 1) return "--grad-accum: a step's micro-batches accumulate their gradients";
  return {};
}

// --cuda-graphs: forward and backward captured after kGraphWarmup eager steps and replayed on
// the batch copied into the graph's own tensors (framework/graphed_step.h); the optimizer,
// the gradient sync and the checks stay eager. Where it cannot, one line says why.
void Trainer::make_graphed_step() {
  const auto say = [this](const std::string& line) {
    if (lead_) fmt::print("{}\n", line);
  };
  if (const std::string why = cuda_graph_blocker(f_, mode_); !why.empty())
    return say(fmt::format("cuda graphs: the step is not captured ({}); it runs eagerly", why));
  graph_images_ = batch_.images.clone();
  graph_labels_ = batch_.labels.clone();
  graphed_ = std::make_unique<GraphedStep>(
      setup_.device.device, kGraphWarmup,
      [this] {
        graph_logits_ = forward_and_loss(graph_images_, graph_labels_, /*last=*/true, graph_loss_);
        (scaler_ ? scaler_->scale(graph_loss_) : graph_loss_).backward();
      },
      model_->parameters(), say);
}

// Whether this micro-batch runs through the graphed step: one of the captured shape.
bool Trainer::graphed() {
  if (!f_.cuda_graphs) return false;
  if (!graph_tried_) {
    graph_tried_ = true;
    make_graphed_step();
  }
  return graphed_ && graphed_->state() != GraphedStep::State::eager &&
         batch_.images.shape() == graph_images_.shape() && batch_.labels.shape() == graph_labels_.shape();
}

// One optimizer step over --grad-accum micro-batches; the record says how it went.
StepRecord Trainer::step() {
  const StepMetrics& m = step_metrics();
  StepRecord r;
  Values& v = r.figures;
  r.start = Clock::now();
  const std::chrono::nanoseconds comm_cpu_start = comm_cpu_time();
  const std::chrono::nanoseconds softirq_start = node_softirq_time();
  for (int k = 0; k < f_.grad_accum; ++k) {
    const bool last = k + 1 == f_.grad_accum;
    auto& t = r.marks.emplace_back();
    t[0] = Clock::now();
    if (!train_loader_->next(batch_)) {
      r.ran_out = true;
      return r;
    }
    skipped_ += report_skipped(batch_);
    batch_ = (*to_device_)(batch_);  // on a GPU: queued behind the previous step's kernels
    t[1] = Clock::now();
    Tensor logits, loss;
    if (graphed()) {  // forward and backward in one replay: its time is backward's
      {
        NoGradGuard no_grad;
        graph_images_.copy_(batch_.images);
        graph_labels_.copy_(batch_.labels);
      }
      t[2] = Clock::now();
      graphed_->run();
      logits = graph_logits_;
      loss = graph_loss_;
    } else {
      logits = forward_and_loss(batch_.images, batch_.labels, last, loss);
      t[2] = Clock::now();
      Tensor objective = f_.grad_accum > 1 ? div(loss, static_cast<double>(f_.grad_accum)) : loss;
      (scaler_ ? scaler_->scale(objective) : objective).backward();
    }
    t[3] = Clock::now();
    sync_->after_backward(last);
    t[4] = Clock::now();
    v[m.data_ms] += ms_between(t[0], t[1]);
    v[m.forward_ms] += ms_between(t[1], t[2]);
    v[m.backward_ms] += ms_between(t[2], t[3]);
    v[m.comm_ms] += ms_between(t[3], t[4]);
    v[m.loss_sum] += loss.item();
    NoGradGuard no_grad;
    v[m.correct] += sum(eq(argmax(logits, 1), batch_.labels)).item();
    v[m.seen] += static_cast<double>(batch_.labels.numel());
  }
  // Waiting inside forward and backward is communication, not compute.
  r.comm = sync_->take();
  v[m.forward_ms] -= r.comm.forward_wait_ms;
  v[m.backward_ms] -= r.comm.backward_wait_ms;
  v[m.comm_ms] += r.comm.forward_wait_ms + r.comm.backward_wait_ms;
  r.optimizer_start = Clock::now();
  clip_gradients();
  if (!guard_->allow_step(v[m.loss_sum] / f_.grad_accum, model_->parameters(), pos_.iteration + 1)) {
    v[m.skipped_steps] = 1;  // --on-nonfinite skip
  } else if (scaler_) {  // unscales (unless clipping did); skips the step when a gradient overflowed fp16
    v[m.skipped_steps] = scaler_->step(*optimizer_) ? 0 : 1;
    scaler_->update();
  } else {
    optimizer_->step();
  }
  sync_->zero_grad(*optimizer_);
  v[m.optimizer_ms] = ms_since(r.optimizer_start);
  if (sync_->after_step(static_cast<int64_t>(v[m.seen]))) {  // fedavg's round
    const StepComm round = sync_->take();
    v[m.comm_ms] += round.after_wait_ms;
    r.comm += round;
  }
  r.end = Clock::now();
  v[m.step_ms] = ms_between(r.start, r.end);
  v[m.comm_cpu_ms] = std::chrono::duration<double, std::milli>(comm_cpu_time() - comm_cpu_start).count();
  v[m.softirq_ms] = std::chrono::duration<double, std::milli>(node_softirq_time() - softirq_start).count();
  r.comm.record(v);
  v[m.images] = v[m.seen];
  v[m.batches] = f_.grad_accum;
  v[m.loss] = v[m.loss_sum] / f_.grad_accum;
  v[m.lr] = optimizer_->lr();
  v[m.peak_memory] = peak_tensor_bytes(setup_.device.device);
  v.derive();
  return r;
}

// A run resumed inside the epoch starts at the checkpoint's iteration, with the sums it had.
EpochStats Trainer::train_epoch(int64_t epoch) {
  const int64_t first = pos_.epoch_iteration;
  EpochProgress start = first > 0 ? std::move(resumed_progress_) : EpochProgress{};
  EpochStats s = std::move(start.stats);
  window_loss_ = start.window_loss;
  window_ = start.window;
  epoch_start_ = Clock::now();
  epoch_first_ = first;
  reset_peak_tensor_bytes(setup_.device.device);
  train_loader_->start_epoch(epoch, first * f_.grad_accum);
  for (int64_t i = first; i < steps_; ++i) {
    const StepRecord r = step();
    if (r.ran_out) break;
    ++pos_.iteration;
    pos_.epoch_iteration = i + 1;
    if (trace_->enabled()) {
      trace_step(*trace_, epoch, i + 1, pos_.iteration, r.start, r.marks, r.optimizer_start,
                 r.end, r.comm);
      trace_counters(*trace_, r.end, r.figures);
    }
    s.tally.add_iteration(r.figures);
    window_loss_ += r.figures[step_metrics().loss];  // this rank's
    ++window_;
    report_bucket_tuning();
    if ((i + 1) % f_.log_every == 0 || i + 1 == steps_) {
      log_iteration(s, epoch, i + 1, r);
    } else if (tty_) {
      const double rate = static_cast<double>((i + 1 - first) * global_batch_) /
                          (ms_since(epoch_start_) / 1e3);
      fmt::print("\r\033[K  [{}/{}] {:.0f} images/s, ETA {:.0f} s", i + 1, steps_, rate,
                 (steps_ - i - 1) * global_batch_ / rate);
      std::fflush(stdout);
    }
    if (checkpoints_->due_in_epoch(pos_, steps_)) checkpoint_in_epoch(epoch, s);
  }
  if (tty_) fmt::print("\r\033[K");
  if (skipped_ > 0) {
    fmt::print(stderr, "train: {}{} bad images skipped in epoch {} (--skip-bad-images)\n",
               pg_ ? fmt::format("rank {}: ", rank_) : "", skipped_, epoch);
    skipped_ = 0;
  }
  if (sync_->end_of_epoch(epoch, epoch == f_.epochs)) {  // fedavg: the models averaged
    Values round(step_metrics().schema);
    sync_->take().record(round);
    s.tally.add_between(round);
  }
  return s;
}

// Once, when ddp's bucket tuner has chosen: what it tried and kept.
void Trainer::report_bucket_tuning() {
  const comm::BucketTuning* t = sync_->bucket_tuning();
  if (tuning_reported_ || !t || !t->done()) return;
  tuning_reported_ = true;
  if (!lead_) return;
  if (tty_) fmt::print("\r\033[K");
  if (chatty_) fmt::print("{}\n", describe_bucket_tuning(*t));
  nlohmann::json j = bucket_tuning_json(*t);  // --quiet too
  j["global_iteration"] = pos_.iteration;  // the last iteration that tuned
  metrics_->write(j);
}

// A logged iteration: every rank keeps the record (the epoch's end reduces them); rank 0
// prints the loss line, and alone writes the metrics line at once.
void Trainer::log_iteration(EpochStats& s, int64_t epoch, int64_t step, const StepRecord& r) {
  const double loss = window_loss_ / window_;
  Values figures = r.figures;
  figures[step_metrics().loss] = loss;
  if (pg_) s.logged.push_back({step, pos_.iteration, figures, WallClock::now()});
  window_loss_ = 0;
  window_ = 0;
  if (!lead_) return;
  if (tty_) fmt::print("\r\033[K");
  if (chatty_) {
    fmt::print("Epoch [{}], Iteration [{}/{}], Loss: {:.4f}{}\n", epoch, step, steps_, loss,
               tty_ ? "" : progress(epoch, step));
  }
  if (pg_) return;  // under a launcher: with every rank's figures, at the epoch's end
  nlohmann::json j{{"type", "iteration"}, {"epoch", epoch}, {"iteration", step},
                   {"global_iteration", pos_.iteration}};
  put_figures(j, kIterationRecord, figures, nullptr);
  metrics_->write(j);
}

// Under a launcher: the logged iterations' records, now with every rank's figures.
void Trainer::write_iterations(int64_t epoch, const std::vector<AcrossRanks::Iteration>& logged) {
  for (const AcrossRanks::Iteration& r : logged) {
    nlohmann::json j{{"type", "iteration"}, {"epoch", epoch}, {"iteration", r.mine->step},
                     {"global_iteration", r.mine->global_iteration}, {"ranks", world_}};
    put_figures(j, kIterationRecord, r.figures.value, &r.figures.max);
    metrics_->write(j, r.mine->logged_at);
  }
}

// Every rank's figures for rank 0's table and metrics, the test set.
void Trainer::finish_epoch(int64_t epoch, const EpochStats& s) {
  const auto summary_start = Clock::now();
  const AcrossRanks a = across_ranks(s, pg_, comm_timeout_);
  trace_->span(Track::compute, "epoch statistics across ranks", "epoch", summary_start,
               Clock::now(), {{"epoch", epoch}});
  const StepMetrics& m = step_metrics();
  const Values& job = a.epoch.value;
  write_iterations(epoch, a.logged);
  nlohmann::json j{{"type", "epoch"}, {"epoch", epoch}, {"global_iteration", pos_.iteration},
                   {"timed_iterations", s.tally.timed()}, {"timing_includes_first", a.first_only}};
  put_figures(j, kEpochRecord, job, pg_ ? &a.epoch.max : nullptr);
  if (pg_) {
    j["ranks"] = world_;
    j["sync"] = flag_name(f_.sync);
  }
  if (lead_) {
    print_epoch_speed(epoch, a, s.tally.timed());
    if (chatty_) fmt::print("{}", epoch_table(a.epoch, world_, pg_ != nullptr));
    if (scaler_ && chatty_) {
      fmt::print("  fp16 loss scale {:g} after the epoch; {:.0f} steps skipped in it (inf or NaN "
                 "gradients), {} in all\n", scaler_->get_scale(), job[m.skipped_steps],
                 scaler_->skipped_steps());
    }
    if (!scaler_ && job[m.skipped_steps] > 0 && chatty_) {
      fmt::print("  {:.0f} steps skipped in the epoch (inf or NaN gradients, --on-nonfinite skip)\n",
                 job[m.skipped_steps]);
    }
    if (scaler_) j["loss_scale"] = scaler_->get_scale();
    fmt::print("Training set: Average loss: {:.4f}, Accuracy: {:.0f}/{:.0f} ({:.0f}%)\n",
               job[m.train_loss], job[m.correct], job[m.seen], 100 * job[m.accuracy]);
    if (f_.eval_every > 0 && (epoch % f_.eval_every == 0 || epoch == f_.epochs)) {
      const auto eval_start = Clock::now();
      report_test_set(j);  // the model itself: local
      trace_->span(Track::compute, "evaluate", "epoch", eval_start, Clock::now(), {{"epoch", epoch}});
    }
  }
  metrics_->write(j);
}

// A --checkpoint-every point inside the epoch. Under a launcher the iterations logged so far
// reach the metrics file first (one reduction), so that the length the checkpoint keeps
// holds them.
void Trainer::checkpoint_in_epoch(int64_t epoch, EpochStats& s) {
  if (pg_) {
    EpochStats logged;
    logged.logged.swap(s.logged);
    write_iterations(epoch, across_ranks(logged, pg_, comm_timeout_).logged);
  }
  EpochProgress progress{.stats = s, .window_loss = window_loss_, .window = window_};
  progress.stats.logged.clear();
  checkpoint(epoch, progress);
}

void Trainer::checkpoint(int64_t epoch, const EpochProgress& progress) {
  if (!checkpoints_->wanted() || !guard_->may_save(model_->state_dict(), pos_.iteration)) return;
  const auto save_start = Clock::now();
  if (checkpoints_->save(pos_, *model_, *optimizer_, scaler_.get(), progress, steps_)) {
    trace_->span(Track::compute, "checkpoint", "epoch", save_start, Clock::now(),
                 {{"epoch", epoch}, {"global_iteration", pos_.iteration}});
  }
}

// The epoch's time per iteration: over those after the first, or the first's when it ran
// no other (it includes first-touch allocations and the kernels' first-call set-up).
void Trainer::print_epoch_speed(int64_t epoch, const AcrossRanks& a, int64_t steps) const {
  if (!chatty_) return;
  const double ms = a.epoch.value[step_metrics().step_ms];
  const double images_per_s = a.epoch.value[step_metrics().images_per_s];
  if (a.first_only) {
    fmt::print("Epoch [{}]: {:.1f} ms for its one iteration, the first (with its one-time set-up; "
               "later ones are timed without it) ({:.0f} images/s)\n", epoch, ms, images_per_s);
  } else {
    fmt::print("Epoch [{}]: {:.1f} ms/iteration over {} iterations after the first ({:.0f} images/s)\n",
               epoch, ms, steps, images_per_s);
  }
}

// Where the output is no terminal (a log file, a batch job), the loss line says how fast it
// goes and what is left: " (N images/s, epoch ETA .., run ETA ..)". The run's counts the
// epochs still to come at this epoch's pace, without their evaluations.
std::string Trainer::progress(int64_t epoch, int64_t step) const {
  const double seconds = ms_since(epoch_start_) / 1e3;
  const int64_t ran = step - epoch_first_;
  if (ran <= 0 || seconds <= 0) return "";
  const double per_step = seconds / static_cast<double>(ran);
  const double epoch_left = per_step * static_cast<double>(steps_ - step);
  const double run_left = epoch_left + per_step * static_cast<double>(steps_ * (f_.epochs - epoch));
  return fmt::format(" ({:.0f} images/s, epoch ETA {}, run ETA {})",
                     static_cast<double>(ran * global_batch_) / seconds, duration_text(epoch_left),
                     duration_text(run_left));
}

// The metrics file's first record of this run: the command line, the build, where it runs.
void Trainer::write_metrics_header() {
  if (!lead_ || f_.metrics.empty()) return;
  std::vector<std::string> hosts;
  for (const std::string& process : setup_.processes) {  // "pid@host", by rank
    const std::string host = process.substr(process.find('@') + 1);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  if (hosts.empty()) hosts.push_back(comm::host_name());
  metrics_->write(metrics_header(arguments_, comm::build_info(), hosts, world_));
}

// --weights: the model's starting point, read by every rank (before the sync broadcasts
// rank 0's state, so that a file one rank cannot read is named by that rank).
void Trainer::load_weights_flag() {
  if (f_.weights.empty()) return;
  try {
    load_weights(f_.weights, *model_);
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("--weights {}", e.what()));
  }
  check_loaded_finite(fmt::format("--weights {}", f_.weights));
}

// --clip-grad-norm: on the gradients the optimizer will apply (averaged over the ranks, and
// under fp16 unscaled first, as torch.cuda.amp's recipe does).
void Trainer::clip_gradients() {
  if (f_.clip_grad_norm <= 0) return;
  if (scaler_) scaler_->unscale_(*optimizer_);
  optim::clip_grad_norm_(model_->parameters(), f_.clip_grad_norm);
}

// Rank 0's evaluation on the test set: its line, and its figures into the metrics record j.
void Trainer::report_test_set(nlohmann::json& j) const {
  const Evaluation e = evaluate(*model_, *test_loader_, *to_device_, f_.label_smoothing);
  fmt::print("Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%){}\n", e.loss / e.total,
             e.correct, e.total, 100.0 * e.correct / e.total,
             e.skipped ? fmt::format("; {} bad images skipped", e.skipped) : "");
  j["test_loss"] = e.loss / e.total;
  j["test_accuracy"] = static_cast<double>(e.correct) / e.total;
  j["test_images"] = e.total;
}

// --evaluate: the test set alone, on rank 0 (the others have nothing to do).
void Trainer::evaluate_only() {
  if (!lead_) return;
  nlohmann::json j{{"type", "evaluation"}, {"global_iteration", pos_.iteration}};
  report_test_set(j);
  metrics_->write(j);
}

// --export-weights: the model's state_dict as PyTorch names it (framework/weights.h), rank 0.
void Trainer::export_weights() {
  if (!lead_ || f_.export_weights.empty()) return;
  save_weights(f_.export_weights, *model_,
               {{"ringflow.model", f_.model}, {"ringflow.commit", ringflow::build_info().commit}});
  if (chatty_) fmt::print("Wrote the model's weights to {}\n", f_.export_weights);
}

void Trainer::run() {
  if (f_.evaluate) {
    evaluate_only();
    export_weights();
    return;
  }
  if (pos_.epoch >= f_.epochs && lead_) {  // a finished run, restarted: no error
    fmt::print("nothing left to train: the checkpoint is at epoch {} of {}\n", pos_.epoch, f_.epochs);
  }
  for (int64_t epoch = pos_.epoch + 1; epoch <= f_.epochs; ++epoch) {
    finish_epoch(epoch, train_epoch(epoch));
    scheduler_->step();
    pos_.epoch = epoch;
    pos_.epoch_iteration = 0;
    checkpoint(epoch, {});
  }
  export_weights();
  trace_->close();
}

}  // namespace
}  // namespace ringflow::apps

namespace ringflow::apps {
namespace {

// Each line of an error begun with the rank where a launcher started several ("[rank 3] "),
// so that the interleaved output of many ranks says which one failed.
void print_error(const std::string& text) {
  std::fflush(stdout);  // what was logged comes before the reason it stopped
  const std::string prefix = rank_prefix();
  std::string lines;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    lines += prefix + text.substr(begin, end - begin) + "\n";
    begin = end + 1;
  }
  fmt::print(stderr, "{}", lines);
}

int fail(const std::exception& e) {
  print_error(fmt::format("train: {}", describe_data_error(e)));
  return 1;
}

// CLI11's end of parsing: --help and --version print and exit 0; a bad flag or config file
// is an error.
int parse_end(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::ostringstream out, err;
  const int code = app.exit(e, out, err);
  std::string text = out.str() + err.str();
  const std::string extra = "INI was not able to parse ";  // CLI11's word for a key no flag has
  if (text.rfind(extra, 0) == 0) {
    const size_t end = text.find('\n');
    text = fmt::format("--config: '{}' is no flag (keys are the long flag names without dashes, "
                       "e.g. batch-size){}", text.substr(extra.size(), end - extra.size()),
                       text.substr(end));
  }
  print_error(text);
  return code;
}

}  // namespace
}  // namespace ringflow::apps

int main(int argc, char** argv) {
  using namespace ringflow::apps;
  CLI::App app{"Train a model with ringflow, alone or data-parallel (mpiexec, srun, torchrun)"};
  Flags f;
  add_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_end(app, e);
  }
  try {
    check_flag_combinations(f);
    if (f.launcher != ringflow::comm::Launcher::env) ringflow::comm::supervise_rank();  // before any thread starts
    Trainer trainer(f, std::vector<std::string>(argv, argv + argc));
    try {
      trainer.run();
    } catch (const std::exception& e) {
      // Said before the trainer is torn down (loader threads, process groups), which is
      // slower than a launcher that ends the job once a rank exits (rank_supervisor.h).
      return fail(e);
    }
    return 0;
  } catch (const std::exception& e) {
    return fail(e);
  }
}
