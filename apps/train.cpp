// train: training of a registered model on Fashion-MNIST, CIFAR-10 or a synthetic data set,
// alone or data-parallel under `mpiexec -n N` (--sync gather-scatter|allreduce|ddp, see
// apps/gradient_sync.h), with per-phase timings (data wait, forward, backward, exposed
// communication, optimizer), bytes and overlap, test-set evaluation, checkpoints and
// --resume, JSON-lines metrics for plots and a Chrome trace per rank (--trace,
// apps/trace.h). Under mpiexec each rank trains on its DistributedSampler share; rank 0
// alone prints, evaluates and writes checkpoints and metrics, and every rank can resume
// from them.
// With no flags: the small CNN on Debian's Fashion-MNIST, one process (what `./dev demo` runs).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ringflow/apps/device_choice.h"
#include "ringflow/apps/gradient_sync.h"
#include "ringflow/apps/trace.h"
#include "ringflow/comm/bootstrap/launch.h"
#include "ringflow/comm/group/launch_group.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/nccl_process_group.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/models/registry.h"

using namespace ringflow;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  std::string model = "small_cnn";
  std::string dataset = "fashion-mnist";
  std::string data_dir;  // default: the data set's usual place
  int epochs = 2;
  int64_t batch_size = 32;
  double lr = 0.02, momentum = 0.9, weight_decay = 0.0;
  std::string schedule = "cosine";
  int warmup_epochs = 0;
  int threads = 0;
  std::string conv_algo = "auto";
  std::string device = "auto", backend = "auto";
  uint64_t seed = 0;
  int log_every = 20;
  int64_t max_iters = 0;
  int eval_every = 1;
  int workers = 1;
  std::string checkpoint, resume, metrics, trace;
  // Data parallelism.
  std::string sync = "none";
  std::string algo = "auto";
  std::string launcher = "auto";
  std::string transport = "auto", socket_interface;
  double bucket_cap_mb = 25;
  std::string comm_hook = "allreduce";
  bool find_unused = false;
  int64_t global_batch = 0;  // 0: --batch-size per rank
  int grad_accum = 1;
  double comm_timeout_s = 300;
};

comm::Algorithm algorithm_from_flag(const std::string& name) {
  return name == "rd" ? comm::Algorithm::recursive_doubling : comm::algorithm_from_name(name);
}

// The number of processes the launcher started, read from its environment (MPICH's Hydra
// sets PMI_SIZE, Open MPI OMPI_COMM_WORLD_SIZE, torchrun WORLD_SIZE, srun SLURM_NTASKS),
// without initialising MPI: --sync none must not, so that a plain single-process run stays one.
int launched_ranks() {
  for (const char* var : {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  }
  const std::optional<comm::EnvLaunch> env = comm::env_launch();
  return env ? env->size : 1;
}

// CLI11's PositiveNumber prints the whole double range in its message; say it plainly.
CLI::Validator bound(double limit, bool inclusive) {
  return CLI::Validator(
      [=](std::string& s) {
        double v = 0;
        try { v = std::stod(s); } catch (const std::exception&) { return "not a number: " + s; }
        if (inclusive ? v >= limit : v > limit) return std::string();
        return fmt::format("must be {} {}, got {}", inclusive ? ">=" : ">", limit, s);
      },
      fmt::format("{} {}", inclusive ? ">=" : ">", limit));
}

// --- data ------------------------------------------------------------------------------
struct Data {
  std::shared_ptr<const data::Dataset> train, test;
  std::vector<std::shared_ptr<const data::Transform>> train_transforms, test_transforms;
};

Data open_data(const Flags& f, const Shape& model_input) {
  Data d;
  if (f.dataset == "fashion-mnist") {
    const std::string dir = f.data_dir.empty() ? data::kFashionMnistDir : f.data_dir;
    d.train = data::Mnist::open(dir, /*train=*/true);
    d.test = data::Mnist::open(dir, /*train=*/false);
    auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.2860f}, std::vector<float>{0.3530f});
    d.train_transforms = d.test_transforms = {norm};
  } else if (f.dataset == "cifar10") {
    const std::string dir = f.data_dir.empty() ? "data/cifar-10-batches-bin" : f.data_dir;
    d.train = data::Cifar10::open(dir, /*train=*/true);
    d.test = data::Cifar10::open(dir, /*train=*/false);
    auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.4914f, 0.4822f, 0.4465f},
                                                  std::vector<float>{0.2470f, 0.2435f, 0.2616f});
    d.train_transforms = {std::make_shared<data::RandomCrop>(4),
                          std::make_shared<data::RandomHorizontalFlip>(), norm};
    d.test_transforms = {norm};
  } else {  // synthetic: the model's input shape
    d.train = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions{.size = 10000, .image_shape = model_input, .seed = f.seed});
    d.test = std::make_shared<data::SyntheticDataset>(
        data::SyntheticOptions{.size = 1000, .image_shape = model_input, .seed = f.seed + 1});
  }
  if (d.train->image_shape() != model_input)
    throw std::invalid_argument(fmt::format(
        "--model {} takes images of shape {}, but --dataset {} has {}", f.model,
        shape_str(model_input), f.dataset, shape_str(d.train->image_shape())));
  return d;
}

// --- the learning-rate schedule (stepped per epoch) ----------------------------------------
std::shared_ptr<const optim::LRSchedule> make_schedule(const Flags& f) {
  const int64_t main_epochs = std::max(1, f.epochs - f.warmup_epochs);
  std::shared_ptr<const optim::LRSchedule> main;
  if (f.schedule == "none") main = std::make_shared<optim::StepLR>(1, 1.0);
  else if (f.schedule == "step") main = std::make_shared<optim::StepLR>(std::max<int64_t>(1, main_epochs / 3));
  else if (f.schedule == "multistep")
    main = std::make_shared<optim::MultiStepLR>(std::vector<int64_t>{main_epochs / 2, main_epochs * 3 / 4});
  else main = std::make_shared<optim::CosineAnnealingLR>(main_epochs);
  if (f.warmup_epochs == 0) return main;
  auto warmup = std::make_shared<optim::LinearLR>(0.1, 1.0, f.warmup_epochs);
  return std::make_shared<optim::SequentialLR>(
      std::vector<std::shared_ptr<const optim::LRSchedule>>{warmup, main},
      std::vector<int64_t>{f.warmup_epochs});
}

// --- timing and metrics ------------------------------------------------------------------
// forward and backward are compute only; comm is the time the training thread waited for
// communication (ddp's buffer broadcast and end-of-backward wait, or the reduction after
// backward of gather-scatter and allreduce).
enum Phase { kData, kForward, kBackward, kComm, kOptimizer, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"data", "forward", "backward", "comm", "optimizer"};
constexpr const char* kPhaseLabels[kPhases] = {"data wait", "forward", "backward compute",
                                               "comm wait (exposed)", "optimizer"};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double ms_since(Clock::time_point t) { return ms_between(t, Clock::now()); }

// One rank's timings and bytes for one iteration, or per iteration averaged over an epoch.
struct Figures {
  double phase_ms[kPhases] = {};
  double step_ms = 0;
  double comm_total_ms = 0;  // the communication thread's time
  double bytes_sent = 0, bytes_received = 0;
  double overlap = 0;  // 1 - exposed / comm_total_ms (0 without communication)
  static constexpr size_t kValues = kPhases + 5;

  Figures& operator+=(const Figures& o) {
    for (int p = 0; p < kPhases; ++p) phase_ms[p] += o.phase_ms[p];
    step_ms += o.step_ms;
    comm_total_ms += o.comm_total_ms;
    bytes_sent += o.bytes_sent;
    bytes_received += o.bytes_received;
    return *this;  // overlap is not additive: see with_overlap()
  }
  Figures divided(double n) const {
    Figures r;
    for (int p = 0; p < kPhases; ++p) r.phase_ms[p] = phase_ms[p] / n;
    r.step_ms = step_ms / n;
    r.comm_total_ms = comm_total_ms / n;
    r.bytes_sent = bytes_sent / n;
    r.bytes_received = bytes_received / n;
    r.overlap = overlap / n;
    return r;
  }
  Figures with_overlap() const {
    Figures r = *this;
    r.overlap = comm_total_ms > 0 ? std::clamp(1 - phase_ms[kComm] / comm_total_ms, 0.0, 1.0) : 0;
    return r;
  }
  void append_to(std::vector<double>& v) const {
    v.insert(v.end(), phase_ms, phase_ms + kPhases);
    v.insert(v.end(), {step_ms, comm_total_ms, bytes_sent, bytes_received, overlap});
  }
  static Figures read(const double*& p) {
    Figures f;
    for (double& x : f.phase_ms) x = *p++;
    f.step_ms = *p++;
    f.comm_total_ms = *p++;
    f.bytes_sent = *p++;
    f.bytes_received = *p++;
    f.overlap = *p++;
    return f;
  }
};

// A logged iteration (every --log-every), as one rank saw it.
struct IterationRecord {
  int64_t step = 0, global_iteration = 0;
  Figures figures;
  double loss = 0;  // this rank's, averaged over the iterations since the last record
  double correct = 0, seen = 0;  // this iteration's
  static constexpr size_t kValues = Figures::kValues + 3;
};

struct EpochStats {
  Figures sum;  // over the iterations after the first
  int64_t timed_steps = 0;
  double loss_sum = 0;  // over micro-batches
  int64_t correct = 0, seen = 0, batches = 0;
  std::vector<IterationRecord> logged;
};

// What rank 0 reports: means over the ranks and maxima (the slowest rank of each figure);
// loss, accuracy and counts summed over the ranks.
struct AcrossRanks {
  Figures mean, max;  // per iteration
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, batches = 0;
  struct Iteration {
    const IterationRecord* mine;
    Figures mean, max;
    double loss = 0;  // the mean over ranks: the loss of the global batch
    double correct = 0, seen = 0;
  };
  std::vector<Iteration> logged;
};

// The epoch's figures and the logged iterations' over every rank, in the two allreduces
// (sum, max) of one vector that the epoch's end runs anyway: the iteration records cost no
// collective of their own, which is why under mpiexec they reach the metrics file at the
// end of the epoch. Without a group, this rank's as mean and max.
AcrossRanks across_ranks(const EpochStats& s, comm::ProcessGroup* pg, comm::Timeout timeout) {
  std::vector<double> v;
  const Figures mine = s.timed_steps ? s.sum.divided(static_cast<double>(s.timed_steps)).with_overlap()
                                     : Figures{};
  mine.append_to(v);
  v.insert(v.end(), {s.loss_sum, static_cast<double>(s.correct), static_cast<double>(s.seen),
                     static_cast<double>(s.batches)});
  for (const IterationRecord& r : s.logged) {
    r.figures.append_to(v);
    v.insert(v.end(), {r.loss, r.correct, r.seen});
  }
  std::vector<double> sum = v, max = v;
  double world = 1;
  if (pg && pg->size() > 1) {
    world = pg->size();
    const int64_t n = static_cast<int64_t>(v.size());
    Tensor sum_t = from_vector(v, {n}, DType::f64), max_t = sum_t.clone();
    comm::CollectiveOptions o;
    o.timeout = timeout;
    o.op = comm::ReduceOp::sum;
    auto a = pg->allreduce(sum_t, o);
    o.op = comm::ReduceOp::max;
    auto b = pg->allreduce(max_t, o);
    a->wait();
    b->wait();
    sum = sum_t.to_vector<double>();
    max = max_t.to_vector<double>();
  }
  AcrossRanks r;
  const double* ps = sum.data();
  const double* pm = max.data();
  r.mean = Figures::read(ps).divided(world);
  r.max = Figures::read(pm);
  r.loss_sum = *ps++;
  r.correct = static_cast<int64_t>(*ps++);
  r.seen = static_cast<int64_t>(*ps++);
  r.batches = static_cast<int64_t>(*ps++);
  pm += 4;
  for (const IterationRecord& mine_it : s.logged) {
    AcrossRanks::Iteration it{&mine_it, Figures::read(ps).divided(world), Figures::read(pm)};
    it.loss = *ps++ / world;
    it.correct = *ps++;
    it.seen = *ps++;
    pm += 3;
    r.logged.push_back(it);
  }
  return r;
}

// The phases, and with a group the communication figures: means under the plain names
// (data_ms, comm_total_ms, overlap, ...), max_* beside them.
void put_figures(nlohmann::json& j, const Figures& mean, const Figures* max) {
  for (int p = 0; p < kPhases; ++p) {
    j[std::string(kPhaseNames[p]) + "_ms"] = mean.phase_ms[p];
    if (max) j["max_" + std::string(kPhaseNames[p]) + "_ms"] = max->phase_ms[p];
  }
  if (!max) return;
  for (const auto& [key, a, b] : {std::tuple{"comm_total_ms", mean.comm_total_ms, max->comm_total_ms},
                                  std::tuple{"bytes_sent", mean.bytes_sent, max->bytes_sent},
                                  std::tuple{"bytes_received", mean.bytes_received, max->bytes_received},
                                  std::tuple{"overlap", mean.overlap, max->overlap}}) {
    j[key] = a;
    j[std::string("max_") + key] = b;
  }
}

// Rank 0's table at the end of an epoch: per iteration, the mean over the ranks and the
// largest rank's figure (each row its own slowest rank). One process: its own figures.
void print_epoch_table(const AcrossRanks& a, int world, bool distributed) {
  const Figures& m = a.mean;
  const Figures& x = a.max;
  auto row = [&](const char* label, double mean, double max, const char* unit, bool share) {
    std::string line = fmt::format("  {:<28}{:>10.{}f} {:<2}", label, mean, unit[0] == 'M' ? 2 : 1, unit);
    line += share ? fmt::format(" ({:3.0f}%)", m.step_ms > 0 ? 100 * mean / m.step_ms : 0.0)
                  : std::string(7, ' ');
    if (distributed) line += fmt::format("{:>12.{}f} {}", max, unit[0] == 'M' ? 2 : 1, unit);
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
  };
  if (distributed) {
    fmt::print("  {:<28}{:>12}{:>22}\n", fmt::format("per iteration, {} ranks", world), "mean",
               "max");
  }
  for (int p = 0; p < kPhases; ++p) {
    if (p == kComm && !distributed) continue;  // one process: nothing to wait for
    row(kPhaseLabels[p], m.phase_ms[p], x.phase_ms[p], "ms", /*share=*/true);
  }
  row("iteration", m.step_ms, x.step_ms, "ms", false);
  if (!distributed) return;
  row("comm total (comm thread)", m.comm_total_ms, x.comm_total_ms, "ms", false);
  row("sent", m.bytes_sent / 1e6, x.bytes_sent / 1e6, "MB", false);
  row("received", m.bytes_received / 1e6, x.bytes_received / 1e6, "MB", false);
  row("overlap (1 - exposed/total)", 100 * m.overlap, 100 * x.overlap, "%", false);
}

class Metrics {
 public:
  explicit Metrics(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    if (!out_) throw std::runtime_error("--metrics: cannot open '" + path + "' for writing");
  }
  void write(const nlohmann::json& j) {
    if (out_.is_open()) out_ << j.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

struct Evaluation {
  double loss;
  int64_t correct, total;
};

Evaluation evaluate(nn::Module& model, data::DataLoader& loader, data::BatchToDevice& to_device) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation e{0, 0, 0};
  for (const data::Batch& host_batch : loader.epoch(0)) {
    const data::Batch b = to_device(host_batch);
    const Tensor logits = model(b.images);
    e.loss += cross_entropy(logits, b.labels, Reduction::sum).item();
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
void trace_step(apps::TraceWriter& trace, int64_t epoch, int64_t step, int64_t global_iteration,
                Clock::time_point start, const std::vector<std::array<Clock::time_point, 5>>& marks,
                Clock::time_point optimizer_start, Clock::time_point end, const apps::StepComm& c) {
  using apps::Track;
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
  for (const apps::CommWait& w : c.waits) {
    trace.span(Track::compute, "comm wait", "wait", w.begin, w.end, {{"what", w.what}});
  }
  trace.span(Track::compute, "optimizer", "compute", optimizer_start, end);
  for (const apps::CommEvent& e : c.events) {
    const std::string name = std::string(e.collective) + " " + e.name;
    trace.span(Track::comm, name, "comm", e.started, e.finished,
               {{"index", e.index}, {"bytes", e.bytes}, {"sent", e.traffic.sent},
                {"received", e.traffic.received},
                {"queued_us", std::chrono::duration<double, std::micro>(e.started - e.launched).count()},
                {"global_iteration", global_iteration}});
    if (e.started > e.launched) trace.flow(name, Track::compute, e.launched, Track::comm, e.started);
  }
}

// Where a rank trains and which groups carry its collectives.
struct Setup {
  apps::DeviceChoice device;
  std::string backend;                          // the gradients' group: "mpi" or "nccl"
  std::shared_ptr<comm::ProcessGroup> pg;       // MPI (the CPU-side statistics); null: --sync none
  std::shared_ptr<comm::ProcessGroup> grad_pg;  // the gradients': pg, or NCCL's over it
  std::string transport;                        // what our allreduce algorithms talk through
  comm::NodeRanks node;
  std::string how;                              // how the ranks were started (launch_group)
};

Setup set_up(const Flags& f, apps::SyncMode mode, comm::Timeout comm_timeout) {
  // Before anything heavy: a device that cannot be had fails here, naming the flag.
  const apps::DeviceRequest want = apps::check_device(f.device);
  Setup s;
  if (mode == apps::SyncMode::none) {
    if (launched_ranks() > 1)
      throw std::invalid_argument(fmt::format(
          "--sync none trains one process, but the launcher started {}; pick --sync "
          "gather-scatter, allreduce or ddp", launched_ranks()));
  } else {
    const comm::LaunchedGroup launched = comm::launch_group(
        {.launcher = comm::launcher_from_name(f.launcher), .transport = f.transport,
         .socket_interface = f.socket_interface, .checking = comm::comm_check_requested_by_env(),
         .timeout = comm_timeout});
    s.pg = launched.group;
    s.transport = launched.transport;
    s.node = launched.node;
    s.how = launched.how;
  }
  s.device = apps::choose_device(want, s.node.local_rank);
  s.backend = apps::choose_backend(f.backend, want, f.algo, s.node.local_size);
  // The training thread's device, before any tensor is made (NCCL's group takes it too).
  if (s.device.device.is_cuda()) set_cuda_device(s.device.device.index);
  s.grad_pg = s.pg;
  if (s.pg && s.backend == "nccl")
    s.grad_pg = std::make_shared<comm::NcclProcessGroup>(
        *s.pg, comm::NcclProcessGroupOptions{.device = s.device.device.index, .timeout = comm_timeout});
  return s;
}

int run(const Flags& f) {
  const apps::SyncMode mode = apps::sync_mode_from_name(f.sync);
  const comm::Timeout comm_timeout(static_cast<int64_t>(f.comm_timeout_s * 1000));
  const Setup setup = set_up(f, mode, comm_timeout);
  const std::shared_ptr<comm::ProcessGroup>& pg = setup.pg;
  const Device device = setup.device.device;
  const int world = pg ? pg->size() : 1, rank = pg ? pg->rank() : 0;
  const bool lead = rank == 0;  // prints, evaluates, writes checkpoints and metrics

  int threads = f.threads;
  if (threads == 0 && pg) {  // share the machine's cores between its ranks
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / setup.node.local_size);
  }
  if (threads > 0) set_num_threads(threads);
  set_conv_algorithm(conv_algorithm_from_name(f.conv_algo));
  int64_t local_batch = f.batch_size;
  if (f.global_batch > 0) {
    const int64_t per_step = int64_t{world} * f.grad_accum;
    if (f.global_batch % per_step != 0)
      throw std::invalid_argument(fmt::format(
          "--global-batch {} is not a multiple of {} ranks x --grad-accum {}", f.global_batch,
          world, f.grad_accum));
    local_batch = f.global_batch / per_step;
  }
  const int64_t global_batch = local_batch * world * f.grad_accum;

  manual_seed(f.seed);
  const Shape input = models::model_input_shape(f.model);
  nn::ModulePtr model = models::make_model(f.model);
  model->to(device);  // in place: the optimizer and the sync hold the same tensors
  const Data d = open_data(f, input);
  data::BatchToDevice to_device(device);
  std::shared_ptr<const data::Sampler> sampler;
  if (pg) {
    sampler = std::make_shared<data::DistributedSampler>(
        d.train->size(), world, rank, data::DistributedSamplerOptions{.shuffle = true, .seed = f.seed});
  }
  data::DataLoader train_loader(d.train, {.batch_size = local_batch, .drop_last = true,
                                          .seed = f.seed, .num_workers = f.workers,
                                          .transforms = d.train_transforms, .sampler = sampler});
  data::DataLoader test_loader(d.test, {.batch_size = 1000, .shuffle = false,
                                        .num_workers = f.workers, .transforms = d.test_transforms});
  if (train_loader.num_batches() < f.grad_accum)
    throw std::invalid_argument(
        world == 1 ? fmt::format("--batch-size {} exceeds the {} training images", local_batch * f.grad_accum,
                                 d.train->size())
                   : fmt::format("a local batch of {} x --grad-accum {} exceeds the {} training images "
                                 "of each rank's share", local_batch, f.grad_accum, train_loader.epoch_size()));
  optim::SGD sgd(model->parameters(), {.lr = f.lr, .momentum = f.momentum,
                                       .weight_decay = f.weight_decay});
  optim::LRScheduler scheduler(sgd, make_schedule(f));
  const std::map<std::string, std::string> info{{"model", f.model}, {"dataset", f.dataset}};

  TrainingPosition pos;
  if (!f.resume.empty()) {  // every rank reads it (its optimizer state is its own)
    const Checkpoint c = load_checkpoint(f.resume, *model, sgd);
    for (const auto& [key, value] : info)
      if (c.info.count(key) && c.info.at(key) != value)
        throw std::invalid_argument(fmt::format("--resume {}: the checkpoint is of {} '{}', not '{}'",
                                                f.resume, key, c.info.at(key), value));
    pos = c.position;
    scheduler.set_epoch(pos.epoch);
    if (lead) fmt::print("Resumed from {} after epoch {} (iteration {})\n", f.resume, pos.epoch, pos.iteration);
  }
  // Collective from here on: rank 0's state everywhere.
  apps::GradientSync sync(model, setup.grad_pg,
                          {.mode = mode, .algorithm = algorithm_from_flag(f.algo),
                           .bucket_cap_mb = f.bucket_cap_mb, .comm_hook = f.comm_hook,
                           .find_unused_parameters = f.find_unused, .timeout = comm_timeout});

  const int64_t steps = f.max_iters > 0 ? std::min(f.max_iters, train_loader.num_batches() / f.grad_accum)
                                        : train_loader.num_batches() / f.grad_accum;
  if (lead) {
    fmt::print("{} ({} parameters) on {}: {} training and {} test images; {} threads; device {}\n",
               f.model, model->num_parameters(), f.dataset, d.train->size(), d.test->size(),
               num_threads(), setup.device.note);
    if (pg)
      fmt::print("--sync {} on {} ranks: {} images per rank and micro-batch, {} per step (x{} "
                 "micro-batches); algorithm {} over {}{}\n", f.sync, world, local_batch,
                 global_batch, f.grad_accum, f.algo, setup.backend == "nccl" ? "NCCL" : setup.transport,
                 mode == apps::SyncMode::ddp ? fmt::format(", buckets of {} MiB, hook {}",
                                                           f.bucket_cap_mb, f.comm_hook)
                                             : "");
    if (pg) fmt::print("ranks started by {}\n", setup.how);
  }
  Metrics metrics(lead ? f.metrics : "");
  const bool tty = lead && ::isatty(STDOUT_FILENO);
  // The origin of every rank's timeline: just after the collective set-up, so that the
  // ranks' traces line up to within a collective's latency.
  apps::TraceWriter trace(f.trace.empty() ? "" : apps::trace_path_for_rank(f.trace, rank, world),
                          rank, Clock::now(),
                          {{"model", f.model}, {"dataset", f.dataset}, {"sync", f.sync},
                           {"algo", f.algo}, {"world", world}, {"local_batch", local_batch}});

  for (int64_t epoch = pos.epoch + 1; epoch <= f.epochs; ++epoch) {
    EpochStats s;
    const auto epoch_start = Clock::now();
    train_loader.start_epoch(epoch);
    data::Batch batch;
    double window_loss = 0;
    int64_t window = 0;
    for (int64_t step = 0; step < steps; ++step) {
      Figures it;
      double* ms = it.phase_ms;
      const auto step_start = Clock::now();
      // Per micro-batch: before loading, forward, backward, after_backward, and its end.
      std::vector<std::array<Clock::time_point, 5>> marks;
      double loss_sum = 0;
      int64_t correct = 0, seen = 0;
      bool ran_out = false;
      for (int k = 0; k < f.grad_accum; ++k) {
        const bool last = k + 1 == f.grad_accum;
        auto& t = marks.emplace_back();
        t[0] = Clock::now();
        if (!train_loader.next(batch)) {
          ran_out = true;
          break;
        }
        batch = to_device(batch);  // on a GPU: queued behind the previous step's kernels
        t[1] = Clock::now();
        const Tensor logits = sync.forward(batch.images, last);
        Tensor loss = cross_entropy(logits, batch.labels);
        t[2] = Clock::now();
        (f.grad_accum > 1 ? div(loss, static_cast<double>(f.grad_accum)) : loss).backward();
        t[3] = Clock::now();
        sync.after_backward(last);
        t[4] = Clock::now();
        ms[kData] += ms_between(t[0], t[1]);
        ms[kForward] += ms_between(t[1], t[2]);
        ms[kBackward] += ms_between(t[2], t[3]);
        ms[kComm] += ms_between(t[3], t[4]);
        loss_sum += loss.item();
        NoGradGuard no_grad;
        correct += static_cast<int64_t>(sum(eq(argmax(logits, 1), batch.labels)).item());
        seen += batch.labels.numel();
      }
      if (ran_out) break;
      // Waiting inside forward and backward is communication, not compute.
      const apps::StepComm c = sync.take();
      ms[kForward] -= c.forward_wait_ms;
      ms[kBackward] -= c.backward_wait_ms;
      ms[kComm] += c.forward_wait_ms + c.backward_wait_ms;
      const auto optimizer_start = Clock::now();
      sgd.step();
      sync.zero_grad(sgd);
      const auto step_end = Clock::now();
      ms[kOptimizer] = ms_between(optimizer_start, step_end);
      it.step_ms = ms_between(step_start, step_end);
      it.comm_total_ms = c.comm_ms;
      it.bytes_sent = static_cast<double>(c.traffic.sent);
      it.bytes_received = static_cast<double>(c.traffic.received);
      it = it.with_overlap();
      ++pos.iteration;
      if (trace.enabled()) {
        trace_step(trace, epoch, step + 1, pos.iteration, step_start, marks, optimizer_start,
                   step_end, c);
      }

      const double l = loss_sum / f.grad_accum;  // this rank's
      s.loss_sum += loss_sum;
      s.correct += correct;
      s.seen += seen;
      s.batches += f.grad_accum;
      window_loss += l;
      ++window;
      if (step > 0) {  // the first iteration pays for first-touch allocations and caches
        s.sum += it;
        ++s.timed_steps;
      }
      if ((step + 1) % f.log_every == 0 || step + 1 == steps) {
        // Every rank keeps the record; the epoch's end reduces them (across_ranks).
        if (pg) {
          s.logged.push_back({step + 1, pos.iteration, it, window_loss / window,
                              static_cast<double>(correct), static_cast<double>(seen)});
        }
        if (lead) {
          if (tty) fmt::print("\r\033[K");
          fmt::print("Epoch [{}], Iteration [{}/{}], Loss: {:.4f}\n", epoch, step + 1, steps,
                     window_loss / window);
          if (!pg) {  // one process: nothing to wait for, the line goes out now
            nlohmann::json j{{"type", "iteration"}, {"epoch", epoch}, {"iteration", step + 1},
                             {"global_iteration", pos.iteration}, {"loss", window_loss / window},
                             {"accuracy", static_cast<double>(correct) / seen},
                             {"lr", sgd.lr()}, {"step_ms", it.step_ms},
                             {"images_per_s", global_batch / it.step_ms * 1e3}};
            put_figures(j, it, nullptr);
            metrics.write(j);
          }
        }
        window_loss = 0;
        window = 0;
      } else if (tty) {
        const double secs = ms_since(epoch_start) / 1e3;
        const double rate = s.seen * world / secs;
        fmt::print("\r\033[K  [{}/{}] {:.0f} images/s, ETA {:.0f} s", step + 1, steps, rate,
                   (steps - step - 1) * global_batch / rate);
        std::fflush(stdout);
      }
    }
    if (tty) fmt::print("\r\033[K");

    // Every rank's figures, for rank 0's table and metrics.
    const auto summary_start = Clock::now();
    const AcrossRanks a = across_ranks(s, pg.get(), comm_timeout);
    trace.span(apps::Track::compute, "epoch statistics across ranks", "epoch", summary_start,
               Clock::now(), {{"epoch", epoch}});
    const Figures& mean = a.mean;
    const double images_per_s = mean.step_ms > 0 ? global_batch / mean.step_ms * 1e3 : 0;
    if (pg) {  // the logged iterations, now with every rank's figures
      for (const AcrossRanks::Iteration& r : a.logged) {
        nlohmann::json j{{"type", "iteration"}, {"epoch", epoch}, {"iteration", r.mine->step},
                         {"global_iteration", r.mine->global_iteration}, {"loss", r.loss},
                         {"accuracy", r.seen > 0 ? r.correct / r.seen : 0.0}, {"lr", sgd.lr()},
                         {"step_ms", r.mean.step_ms},
                         {"images_per_s", r.mean.step_ms > 0 ? global_batch / r.mean.step_ms * 1e3 : 0.0},
                         {"max_step_ms", r.max.step_ms}, {"ranks", world}};
        put_figures(j, r.mean, &r.max);
        metrics.write(j);
      }
    }
    nlohmann::json j{{"type", "epoch"}, {"epoch", epoch}, {"global_iteration", pos.iteration},
                     {"train_loss", a.loss_sum / std::max<int64_t>(1, a.batches)},
                     {"train_accuracy", static_cast<double>(a.correct) / std::max<int64_t>(1, a.seen)},
                     {"ms_per_iteration", mean.step_ms}, {"lr", sgd.lr()},
                     {"images_per_s", images_per_s}};
    put_figures(j, mean, pg ? &a.max : nullptr);
    if (pg) {
      j["ranks"] = world;
      j["sync"] = f.sync;
      j["max_ms_per_iteration"] = a.max.step_ms;
    }
    if (lead) {
      fmt::print("Epoch [{}]: {:.1f} ms/iteration over {} iterations after the first ({:.0f} images/s)\n",
                 epoch, mean.step_ms, s.timed_steps, images_per_s);
      print_epoch_table(a, world, pg != nullptr);
      fmt::print("Training set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n",
                 a.loss_sum / std::max<int64_t>(1, a.batches), a.correct, a.seen,
                 100.0 * a.correct / std::max<int64_t>(1, a.seen));
      if (f.eval_every > 0 && (epoch % f.eval_every == 0 || epoch == f.epochs)) {
        const auto eval_start = Clock::now();
        const Evaluation e = evaluate(*model, test_loader, to_device);  // the model itself: local
        trace.span(apps::Track::compute, "evaluate", "epoch", eval_start, Clock::now(),
                   {{"epoch", epoch}});
        fmt::print("Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n", e.loss / e.total,
                   e.correct, e.total, 100.0 * e.correct / e.total);
        j["test_loss"] = e.loss / e.total;
        j["test_accuracy"] = static_cast<double>(e.correct) / e.total;
      }
    }
    metrics.write(j);
    scheduler.step();
    pos.epoch = epoch;
    if (lead && !f.checkpoint.empty()) {
      const auto save_start = Clock::now();
      save_checkpoint(f.checkpoint, *model, sgd, pos, info);
      trace.span(apps::Track::compute, "checkpoint", "epoch", save_start, Clock::now(),
                 {{"epoch", epoch}});
    }
  }
  trace.close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a model with ringflow, alone or data-parallel under mpiexec -n N"};
  Flags f;
  const auto above0 = bound(0, false), at_least0 = bound(0, true);
  app.add_option("--model", f.model, "model name")->capture_default_str()
      ->check(CLI::IsMember(models::model_names()));
  app.add_option("--dataset", f.dataset, "data set")->capture_default_str()
      ->check(CLI::IsMember({"fashion-mnist", "cifar10", "synthetic"}));
  app.add_option("--data-dir", f.data_dir, "folder of the data set's files (default: "
                 "/usr/share/datasets/fashion-mnist, data/cifar-10-batches-bin)");
  app.add_option("--epochs", f.epochs, "passes over the training set")->capture_default_str()->check(above0);
  auto* local_batch = app.add_option("--batch-size,--local-batch", f.batch_size,
                                     "images per step, per rank and micro-batch (weak scaling)")
      ->capture_default_str()->check(above0);
  app.add_option("--global-batch", f.global_batch, "images per step over all ranks and micro-batches; "
                 "each rank takes its share (strong scaling)")->check(above0)->excludes(local_batch);
  app.add_option("--lr", f.lr, "SGD learning rate")->capture_default_str()->check(above0);
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", f.weight_decay, "SGD weight decay")->capture_default_str()->check(at_least0);
  app.add_option("--schedule", f.schedule, "learning-rate schedule over the epochs")->capture_default_str()
      ->check(CLI::IsMember({"none", "step", "multistep", "cosine"}));
  app.add_option("--warmup-epochs", f.warmup_epochs, "linear warm-up epochs before the schedule")
      ->capture_default_str()->check(at_least0);
  app.add_option("--threads", f.threads, "CPU threads per rank (0: the machine's cores shared "
                 "between its ranks)")->capture_default_str()->check(at_least0);
  app.add_option("--conv-algo", f.conv_algo, "CPU convolutions: auto (oneDNN's choice, Winograd "
                 "included) or direct (the plain sum, as PyTorch's)")
      ->capture_default_str()->check(CLI::IsMember(conv_algorithm_names()));
  app.add_option("--device", f.device, "cpu, cuda (each rank its node-local GPU), cuda:N, or auto "
                 "(the GPU when one is usable, else the CPU)")->capture_default_str();
  app.add_option("--backend", f.backend, "process group of the gradients: mpi, nccl (GPU tensors), or auto "
                 "(nccl when each rank has a GPU of its own)")->capture_default_str()->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  app.add_option("--workers", f.workers, "data-loading threads (0: load in the training thread)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--seed", f.seed, "seed of initialisation, shuffling and augmentation")->capture_default_str();
  app.add_option("--log-every", f.log_every, "iterations between loss lines")->capture_default_str()->check(above0);
  app.add_option("--max-iters", f.max_iters, "stop each epoch after this many iterations (0: all)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--eval-every", f.eval_every, "epochs between test-set evaluations (0: none, "
                 "e.g. for timing runs)")->capture_default_str()->check(at_least0);
  app.add_option("--checkpoint", f.checkpoint, "write a checkpoint here after every epoch");
  app.add_option("--resume", f.resume, "continue the run saved in this checkpoint");
  app.add_option("--metrics", f.metrics, "append JSON lines (iterations, epochs) to this file "
                 "(rank 0); under mpiexec each iteration's line, with the mean and max over the "
                 "ranks, is written at the end of its epoch");
  app.add_option("--trace", f.trace, "write a Chrome trace-event JSON of every iteration (opens "
                 "in ui.perfetto.dev, chrome://tracing): compute spans on one track, each "
                 "collective on another; under mpiexec one file per rank, the rank inserted "
                 "before the extension (trace.json: trace.rank0.json, trace.rank1.json, ...)");
  app.add_option("--sync", f.sync, "gradient synchronisation: none (one process), gather-scatter, "
                 "allreduce (each gradient after backward) or ddp (bucketed, overlapped); "
                 "the others under mpiexec -n N, torchrun or srun")->capture_default_str()
      ->check(CLI::IsMember({"none", "gather-scatter", "allreduce", "ddp"}));
  app.add_option("--algo", f.algo, "allreduce algorithm of --sync allreduce and ddp")->capture_default_str()
      ->check(CLI::IsMember({"auto", "ring", "tree", "rd", "native", "naive"}));
  app.add_option("--launcher", f.launcher,
                 "how the ranks were started: mpi (mpiexec, srun with PMI), env (torchrun's "
                 "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or Slurm's SLURM_PROCID, "
                 "SLURM_NTASKS: a TCP rendezvous, no MPI), or auto (by the environment)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "mpi", "env"}));
  app.add_option("--transport", f.transport,
                 "what our allreduce algorithms talk through: auto (shared memory on one node, "
                 "else TCP), shm, tcp or mpi (MPI point to point)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "shm", "tcp", "mpi"}));
  app.add_option("--socket-interface", f.socket_interface,
                 "--transport tcp: the network interface (default: the first up, not loopback)");
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "ddp: MiB per gradient bucket (0: one per parameter)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--comm-hook", f.comm_hook, "ddp: allreduce (average), fp16 (compressed) or noop "
                 "(no communication, gradients stay local: a reference for measurements only)")
      ->capture_default_str()->check(CLI::IsMember({"allreduce", "fp16", "noop"}));
  app.add_flag("--find-unused", f.find_unused, "ddp: look for parameters the loss does not reach "
               "after each forward");
  app.add_option("--grad-accum", f.grad_accum, "micro-batches per optimizer step (ddp: no_sync "
                 "for all but the last)")->capture_default_str()->check(bound(1, true));
  app.add_option("--comm-timeout", f.comm_timeout_s, "seconds a collective may take before the "
                 "run fails (rank 0 evaluates alone meanwhile)")->capture_default_str()->check(above0);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    fmt::print(stderr, "train: {}\n", e.what());
    return 1;
  }
}
