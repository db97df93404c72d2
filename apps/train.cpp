// train: training of a registered model on Fashion-MNIST, CIFAR-10 or a synthetic data set,
// alone or data-parallel under `mpiexec -n N` (--sync gather-scatter|allreduce|ddp, see
// apps/gradient_sync.h), with per-phase timings (data wait, forward, backward, exposed
// communication, optimizer), bytes and overlap, test-set evaluation, checkpoints and
// --resume, and JSON-lines metrics for plots. Under mpiexec each rank trains on its
// DistributedSampler share; rank 0 alone prints, evaluates and writes checkpoints and
// metrics, and every rank can resume from them.
// With no flags: the small CNN on Debian's Fashion-MNIST, one process (what `./dev demo` runs).
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "apps/gradient_sync.h"
#include "comm/mpi_process_group.h"
#include "framework/ringflow.h"
#include "models/registry.h"

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
  uint64_t seed = 0;
  int log_every = 20;
  int64_t max_iters = 0;
  int eval_every = 1;
  int workers = 1;
  std::string checkpoint, resume, metrics;
  // Data parallelism.
  std::string sync = "none";
  std::string algo = "auto";
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
// sets PMI_SIZE, Open MPI OMPI_COMM_WORLD_SIZE), without initialising MPI: --sync none
// must not, so that a plain single-process run stays one.
int launched_ranks() {
  for (const char* var : {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"}) {
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  }
  return 1;
}

// Ranks of this job on this machine, to share its cores between them.
int ranks_on_this_node() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int n = 1;
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return n;
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

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct EpochStats {
  double phase_ms[kPhases] = {};  // summed over the iterations after the first
  double step_ms = 0;             // likewise
  double comm_total_ms = 0;       // likewise: the communication thread's time
  double bytes_sent = 0, bytes_received = 0;  // likewise
  int64_t timed_steps = 0;
  double loss_sum = 0;  // over micro-batches
  int64_t correct = 0, seen = 0, batches = 0;
};

std::vector<double> flatten(const EpochStats& s) {
  std::vector<double> v(s.phase_ms, s.phase_ms + kPhases);
  for (double x : {s.step_ms, s.comm_total_ms, s.bytes_sent, s.bytes_received,
                   static_cast<double>(s.timed_steps), s.loss_sum, static_cast<double>(s.correct),
                   static_cast<double>(s.seen), static_cast<double>(s.batches)})
    v.push_back(x);
  return v;
}

EpochStats unflatten(const std::vector<double>& v) {
  EpochStats s;
  size_t i = 0;
  for (int p = 0; p < kPhases; ++p) s.phase_ms[p] = v[i++];
  s.step_ms = v[i++];
  s.comm_total_ms = v[i++];
  s.bytes_sent = v[i++];
  s.bytes_received = v[i++];
  s.timed_steps = static_cast<int64_t>(v[i++]);
  s.loss_sum = v[i++];
  s.correct = static_cast<int64_t>(v[i++]);
  s.seen = static_cast<int64_t>(v[i++]);
  s.batches = static_cast<int64_t>(v[i++]);
  return s;
}

// The epoch's figures over every rank (two allreduces): the mean and the maximum of the
// timings and bytes; the loss, accuracy and counts summed over the ranks. Without a group,
// this rank's as both.
std::pair<EpochStats, EpochStats> across_ranks(const EpochStats& mine, comm::ProcessGroup* pg,
                                               comm::Timeout timeout) {
  if (!pg || pg->size() == 1) return {mine, mine};
  const std::vector<double> v = flatten(mine);
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor sum = from_vector(v, {n}, DType::f64), max = sum.clone();
  comm::CollectiveOptions o;
  o.timeout = timeout;
  o.op = comm::ReduceOp::sum;
  auto a = pg->allreduce(sum, o);
  o.op = comm::ReduceOp::max;
  auto b = pg->allreduce(max, o);
  a->wait();
  b->wait();
  EpochStats mean = unflatten(sum.to_vector<double>()), top = unflatten(max.to_vector<double>());
  const double w = pg->size();
  for (double& x : mean.phase_ms) x /= w;
  mean.step_ms /= w;
  mean.comm_total_ms /= w;
  mean.bytes_sent /= w;
  mean.bytes_received /= w;
  mean.timed_steps = mine.timed_steps;  // the same on every rank
  return {mean, top};
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

Evaluation evaluate(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  Evaluation e{0, 0, 0};
  for (const data::Batch& b : loader.epoch(0)) {
    const Tensor logits = model(b.images);
    e.loss += cross_entropy(logits, b.labels, Reduction::sum).item();
    e.correct += static_cast<int64_t>(sum(eq(argmax(logits, 1), b.labels)).item());
    e.total += b.labels.numel();
  }
  model.train();
  return e;
}

int run(const Flags& f) {
  const apps::SyncMode mode = apps::sync_mode_from_name(f.sync);
  const comm::Timeout comm_timeout(static_cast<int64_t>(f.comm_timeout_s * 1000));
  std::shared_ptr<comm::ProcessGroup> pg;
  if (mode == apps::SyncMode::none) {
    if (launched_ranks() > 1)
      throw std::invalid_argument(fmt::format(
          "--sync none trains one process, but the launcher started {}; pick --sync "
          "gather-scatter, allreduce or ddp", launched_ranks()));
  } else {
    comm::MpiProcessGroupOptions o;
    o.checking = comm::comm_check_requested_by_env();
    pg = std::make_shared<comm::MpiProcessGroup>(MPI_COMM_WORLD, o);
  }
  const int world = pg ? pg->size() : 1, rank = pg ? pg->rank() : 0;
  const bool lead = rank == 0;  // prints, evaluates, writes checkpoints and metrics

  int threads = f.threads;
  if (threads == 0 && pg) {  // share the machine's cores between its ranks
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_on_this_node());
  }
  if (threads > 0) set_num_threads(threads);
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
  const Data d = open_data(f, input);
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
  apps::GradientSync sync(model, pg, {.mode = mode, .algorithm = algorithm_from_flag(f.algo),
                                      .bucket_cap_mb = f.bucket_cap_mb, .comm_hook = f.comm_hook,
                                      .find_unused_parameters = f.find_unused,
                                      .timeout = comm_timeout});

  const int64_t steps = f.max_iters > 0 ? std::min(f.max_iters, train_loader.num_batches() / f.grad_accum)
                                        : train_loader.num_batches() / f.grad_accum;
  if (lead) {
    fmt::print("{} ({} parameters) on {}: {} training and {} test images; {} threads\n", f.model,
               model->num_parameters(), f.dataset, d.train->size(), d.test->size(), num_threads());
    if (pg)
      fmt::print("--sync {} on {} ranks: {} images per rank and micro-batch, {} per step (x{} "
                 "micro-batches); algorithm {}{}\n", f.sync, world, local_batch, global_batch,
                 f.grad_accum, f.algo,
                 mode == apps::SyncMode::ddp ? fmt::format(", buckets of {} MiB, hook {}",
                                                           f.bucket_cap_mb, f.comm_hook)
                                             : "");
  }
  Metrics metrics(lead ? f.metrics : "");
  const bool tty = lead && ::isatty(STDOUT_FILENO);

  for (int64_t epoch = pos.epoch + 1; epoch <= f.epochs; ++epoch) {
    EpochStats s;
    const auto epoch_start = Clock::now();
    train_loader.start_epoch(epoch);
    data::Batch batch;
    double window_loss = 0;
    int64_t window = 0;
    for (int64_t step = 0; step < steps; ++step) {
      double ms[kPhases] = {};
      const auto step_start = Clock::now();
      double loss_sum = 0;
      int64_t correct = 0, seen = 0;
      bool ran_out = false;
      for (int k = 0; k < f.grad_accum; ++k) {
        const bool last = k + 1 == f.grad_accum;
        auto t = Clock::now();
        if (!train_loader.next(batch)) {
          ran_out = true;
          break;
        }
        ms[kData] += ms_since(t);
        t = Clock::now();
        const Tensor logits = sync.forward(batch.images, last);
        Tensor loss = cross_entropy(logits, batch.labels);
        ms[kForward] += ms_since(t);
        t = Clock::now();
        (f.grad_accum > 1 ? div(loss, static_cast<double>(f.grad_accum)) : loss).backward();
        ms[kBackward] += ms_since(t);
        t = Clock::now();
        sync.after_backward(last);
        ms[kComm] += ms_since(t);
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
      auto t = Clock::now();
      sgd.step();
      // ddp: keep the gradients as views of its buckets (zeroed, not dropped).
      sgd.zero_grad(/*set_to_none=*/mode != apps::SyncMode::ddp);
      ms[kOptimizer] = ms_since(t);
      const double step_ms = ms_since(step_start);
      ++pos.iteration;

      const double l = loss_sum / f.grad_accum;  // this rank's
      s.loss_sum += loss_sum;
      s.correct += correct;
      s.seen += seen;
      s.batches += f.grad_accum;
      window_loss += l;
      ++window;
      if (step > 0) {  // the first iteration pays for first-touch allocations and caches
        for (int p = 0; p < kPhases; ++p) s.phase_ms[p] += ms[p];
        s.step_ms += step_ms;
        s.comm_total_ms += c.comm_ms;
        s.bytes_sent += static_cast<double>(c.traffic.sent);
        s.bytes_received += static_cast<double>(c.traffic.received);
        ++s.timed_steps;
      }
      if (!lead) continue;
      if ((step + 1) % f.log_every == 0 || step + 1 == steps) {
        if (tty) fmt::print("\r\033[K");
        fmt::print("Epoch [{}], Iteration [{}/{}], Loss: {:.4f}\n", epoch, step + 1, steps,
                   window_loss / window);
        nlohmann::json j{{"type", "iteration"}, {"epoch", epoch}, {"iteration", step + 1},
                         {"global_iteration", pos.iteration}, {"loss", window_loss / window},
                         {"accuracy", static_cast<double>(correct) / seen},
                         {"lr", sgd.lr()}, {"step_ms", step_ms},
                         {"images_per_s", global_batch / step_ms * 1e3}};
        for (int p = 0; p < kPhases; ++p) j[std::string(kPhaseNames[p]) + "_ms"] = ms[p];
        if (pg) {
          j["comm_total_ms"] = c.comm_ms;
          j["bytes_sent"] = c.traffic.sent;
          j["bytes_received"] = c.traffic.received;
          j["overlap"] = c.comm_ms > 0 ? std::clamp(1 - c.exposed_ms() / c.comm_ms, 0.0, 1.0) : 0.0;
        }
        metrics.write(j);
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

    // Every rank's figures, for rank 0's table.
    const auto [mean, top] = across_ranks(s, pg.get(), comm_timeout);
    const double per_iter = mean.timed_steps ? mean.step_ms / mean.timed_steps : 0;
    const double images_per_s = per_iter > 0 ? global_batch / per_iter * 1e3 : 0;
    auto per_step = [&](double total) { return mean.timed_steps ? total / mean.timed_steps : 0; };
    const double comm_total = per_step(mean.comm_total_ms), exposed = per_step(mean.phase_ms[kComm]);
    const double overlap = comm_total > 0 ? std::clamp(1 - exposed / comm_total, 0.0, 1.0) : 0;
    nlohmann::json j{{"type", "epoch"}, {"epoch", epoch}, {"global_iteration", pos.iteration},
                     {"train_loss", mean.loss_sum / std::max<int64_t>(1, mean.batches)},
                     {"train_accuracy", static_cast<double>(mean.correct) / std::max<int64_t>(1, mean.seen)},
                     {"ms_per_iteration", per_iter}, {"lr", sgd.lr()},
                     {"images_per_s", images_per_s}};
    for (int p = 0; p < kPhases; ++p) j[std::string(kPhaseNames[p]) + "_ms"] = per_step(mean.phase_ms[p]);
    if (pg) {
      j["ranks"] = world;
      j["sync"] = f.sync;
      j["max_ms_per_iteration"] = top.timed_steps ? top.step_ms / top.timed_steps : 0;
      for (int p = 0; p < kPhases; ++p)
        j["max_" + std::string(kPhaseNames[p]) + "_ms"] = top.timed_steps ? top.phase_ms[p] / top.timed_steps : 0;
      j["comm_total_ms"] = comm_total;
      j["bytes_sent"] = per_step(mean.bytes_sent);
      j["bytes_received"] = per_step(mean.bytes_received);
      j["overlap"] = overlap;
    }
    if (lead) {
      std::string phases;
      for (int p = 0; p < kPhases; ++p) {
        if (p == kComm && !pg) continue;  // one process: nothing to wait for
        phases += fmt::format("{}{} {:.1f} ms ({:.0f}%)", phases.empty() ? "" : ", ", kPhaseNames[p],
                              per_step(mean.phase_ms[p]),
                              mean.step_ms > 0 ? 100 * mean.phase_ms[p] / mean.step_ms : 0);
      }
      fmt::print("Epoch [{}]: {:.1f} ms/iteration over {} iterations after the first ({:.0f} images/s): {}\n",
                 epoch, per_iter, mean.timed_steps, images_per_s, phases);
      if (pg) {
        std::string maxima;
        for (int p = 0; p < kPhases; ++p)
          maxima += fmt::format(", {} {:.1f}", kPhaseNames[p],
                                top.timed_steps ? top.phase_ms[p] / top.timed_steps : 0);
        fmt::print("  (mean over {} ranks; the slowest rank: {:.1f} ms/iteration{})\n", world,
                   top.timed_steps ? top.step_ms / top.timed_steps : 0, maxima);
        fmt::print("Communication per iteration and rank: {:.2f} MB sent, {:.2f} MB received, "
                   "{:.1f} ms on the communication thread, {:.1f} ms exposed: overlap {:.0f}%\n",
                   per_step(mean.bytes_sent) / 1e6, per_step(mean.bytes_received) / 1e6,
                   comm_total, exposed, 100 * overlap);
      }
      fmt::print("Training set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n",
                 mean.loss_sum / std::max<int64_t>(1, mean.batches), mean.correct, mean.seen,
                 100.0 * mean.correct / std::max<int64_t>(1, mean.seen));
      if (epoch % f.eval_every == 0 || epoch == f.epochs) {
        const Evaluation e = evaluate(*model, test_loader);  // the model itself: local
        fmt::print("Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n", e.loss / e.total,
                   e.correct, e.total, 100.0 * e.correct / e.total);
        j["test_loss"] = e.loss / e.total;
        j["test_accuracy"] = static_cast<double>(e.correct) / e.total;
      }
    }
    metrics.write(j);
    scheduler.step();
    pos.epoch = epoch;
    if (lead && !f.checkpoint.empty()) save_checkpoint(f.checkpoint, *model, sgd, pos, info);
  }
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
  app.add_option("--workers", f.workers, "data-loading threads (0: load in the training thread)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--seed", f.seed, "seed of initialisation, shuffling and augmentation")->capture_default_str();
  app.add_option("--log-every", f.log_every, "iterations between loss lines")->capture_default_str()->check(above0);
  app.add_option("--max-iters", f.max_iters, "stop each epoch after this many iterations (0: all)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--eval-every", f.eval_every, "epochs between test-set evaluations")->capture_default_str()->check(above0);
  app.add_option("--checkpoint", f.checkpoint, "write a checkpoint here after every epoch");
  app.add_option("--resume", f.resume, "continue the run saved in this checkpoint");
  app.add_option("--metrics", f.metrics, "append JSON lines (iterations, epochs) to this file");
  app.add_option("--sync", f.sync, "gradient synchronisation: none (one process), gather-scatter, "
                 "allreduce (each gradient after backward) or ddp (bucketed, overlapped); "
                 "the others under mpiexec -n N")->capture_default_str()
      ->check(CLI::IsMember({"none", "gather-scatter", "allreduce", "ddp"}));
  app.add_option("--algo", f.algo, "allreduce algorithm of --sync allreduce and ddp")->capture_default_str()
      ->check(CLI::IsMember({"auto", "ring", "tree", "rd", "native", "naive"}));
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "ddp: MiB per gradient bucket (0: one per parameter)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--comm-hook", f.comm_hook, "ddp: allreduce (average) or fp16 (compressed)")
      ->capture_default_str()->check(CLI::IsMember({"allreduce", "fp16"}));
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
