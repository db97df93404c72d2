// train: single-node training of a registered model on Fashion-MNIST, CIFAR-10 or a
// synthetic data set, with per-phase timings (data wait, forward, backward, optimizer),
// test-set evaluation, checkpoints and --resume, and JSON-lines metrics for plots.
// With no flags: the small CNN on Debian's Fashion-MNIST (what `./dev demo` runs).
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
#include <vector>

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
};

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
enum Phase { kData, kForward, kBackward, kOptimizer, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"data", "forward", "backward", "optimizer"};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct EpochStats {
  double phase_ms[kPhases] = {};  // summed over the iterations after the first
  double step_ms = 0;             // likewise
  int64_t timed_steps = 0;
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, steps = 0;
};

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
  if (f.threads > 0) set_num_threads(f.threads);
  manual_seed(f.seed);
  const Shape input = models::model_input_shape(f.model);
  nn::ModulePtr model = models::make_model(f.model);
  const Data d = open_data(f, input);
  data::DataLoader train_loader(d.train, {.batch_size = f.batch_size, .drop_last = true,
                                          .seed = f.seed, .num_workers = f.workers,
                                          .transforms = d.train_transforms});
  data::DataLoader test_loader(d.test, {.batch_size = 1000, .shuffle = false,
                                        .num_workers = f.workers, .transforms = d.test_transforms});
  if (train_loader.num_batches() == 0)
    throw std::invalid_argument(fmt::format("--batch-size {} exceeds the {} training images",
                                            f.batch_size, d.train->size()));
  optim::SGD sgd(model->parameters(), {.lr = f.lr, .momentum = f.momentum,
                                       .weight_decay = f.weight_decay});
  optim::LRScheduler scheduler(sgd, make_schedule(f));
  const std::map<std::string, std::string> info{{"model", f.model}, {"dataset", f.dataset}};

  TrainingPosition pos;
  if (!f.resume.empty()) {
    const Checkpoint c = load_checkpoint(f.resume, *model, sgd);
    for (const auto& [key, value] : info)
      if (c.info.count(key) && c.info.at(key) != value)
        throw std::invalid_argument(fmt::format("--resume {}: the checkpoint is of {} '{}', not '{}'",
                                                f.resume, key, c.info.at(key), value));
    pos = c.position;
    scheduler.set_epoch(pos.epoch);
    fmt::print("Resumed from {} after epoch {} (iteration {})\n", f.resume, pos.epoch, pos.iteration);
  }

  const int64_t steps = f.max_iters > 0 ? std::min(f.max_iters, train_loader.num_batches())
                                        : train_loader.num_batches();
  fmt::print("{} ({} parameters) on {}: {} training and {} test images; {} threads\n", f.model,
             model->num_parameters(), f.dataset, d.train->size(), d.test->size(), num_threads());
  Metrics metrics(f.metrics);
  const bool tty = ::isatty(STDOUT_FILENO);

  for (int64_t epoch = pos.epoch + 1; epoch <= f.epochs; ++epoch) {
    EpochStats s;
    const auto epoch_start = Clock::now();
    train_loader.start_epoch(epoch);
    data::Batch batch;
    double window_loss = 0;
    int64_t window = 0;
    for (int64_t step = 0; step < steps; ++step) {
      double ms[kPhases];
      auto t = Clock::now();
      const auto step_start = t;
      if (!train_loader.next(batch)) break;
      ms[kData] = ms_since(t);
      t = Clock::now();
      const Tensor logits = (*model)(batch.images);
      const Tensor loss = cross_entropy(logits, batch.labels);
      ms[kForward] = ms_since(t);
      t = Clock::now();
      loss.backward();
      ms[kBackward] = ms_since(t);
      t = Clock::now();
      sgd.step();
      sgd.zero_grad();
      ms[kOptimizer] = ms_since(t);
      const double step_ms = ms_since(step_start);
      ++pos.iteration;

      const double l = loss.item();
      int64_t correct;
      {
        NoGradGuard no_grad;
        correct = static_cast<int64_t>(sum(eq(argmax(logits, 1), batch.labels)).item());
      }
      s.loss_sum += l;
      s.correct += correct;
      s.seen += batch.labels.numel();
      ++s.steps;
      window_loss += l;
      ++window;
      if (step > 0) {  // the first iteration pays for first-touch allocations and caches
        for (int p = 0; p < kPhases; ++p) s.phase_ms[p] += ms[p];
        s.step_ms += step_ms;
        ++s.timed_steps;
      }
      if ((step + 1) % f.log_every == 0 || step + 1 == steps) {
        if (tty) fmt::print("\r\033[K");
        fmt::print("Epoch [{}], Iteration [{}/{}], Loss: {:.4f}\n", epoch, step + 1, steps,
                   window_loss / window);
        nlohmann::json j{{"type", "iteration"}, {"epoch", epoch}, {"iteration", step + 1},
                         {"global_iteration", pos.iteration}, {"loss", window_loss / window},
                         {"accuracy", static_cast<double>(correct) / batch.labels.numel()},
                         {"lr", sgd.lr()}, {"step_ms", step_ms},
                         {"images_per_s", batch.labels.numel() / step_ms * 1e3}};
        for (int p = 0; p < kPhases; ++p) j[std::string(kPhaseNames[p]) + "_ms"] = ms[p];
        metrics.write(j);
        window_loss = 0;
        window = 0;
      } else if (tty) {
        const double secs = ms_since(epoch_start) / 1e3;
        const double rate = s.seen / secs;
        fmt::print("\r\033[K  [{}/{}] {:.0f} images/s, ETA {:.0f} s", step + 1, steps, rate,
                   (steps - step - 1) * f.batch_size / rate);
        std::fflush(stdout);
      }
    }
    if (tty) fmt::print("\r\033[K");

    const double per_iter = s.timed_steps ? s.step_ms / s.timed_steps : 0;
    std::string phases;
    for (int p = 0; p < kPhases; ++p)
      phases += fmt::format("{}{} {:.1f} ms ({:.0f}%)", p ? ", " : "", kPhaseNames[p],
                            s.timed_steps ? s.phase_ms[p] / s.timed_steps : 0,
                            s.step_ms > 0 ? 100 * s.phase_ms[p] / s.step_ms : 0);
    fmt::print("Epoch [{}]: {:.1f} ms/iteration over {} iterations after the first ({:.0f} images/s): {}\n",
               epoch, per_iter, s.timed_steps, per_iter > 0 ? f.batch_size / per_iter * 1e3 : 0, phases);
    fmt::print("Training set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n",
               s.loss_sum / std::max<int64_t>(1, s.steps), s.correct, s.seen,
               100.0 * s.correct / std::max<int64_t>(1, s.seen));
    nlohmann::json j{{"type", "epoch"}, {"epoch", epoch}, {"global_iteration", pos.iteration},
                     {"train_loss", s.loss_sum / std::max<int64_t>(1, s.steps)},
                     {"train_accuracy", static_cast<double>(s.correct) / std::max<int64_t>(1, s.seen)},
                     {"ms_per_iteration", per_iter}, {"lr", sgd.lr()},
                     {"images_per_s", per_iter > 0 ? f.batch_size / per_iter * 1e3 : 0}};
    for (int p = 0; p < kPhases; ++p)
      j[std::string(kPhaseNames[p]) + "_ms"] = s.timed_steps ? s.phase_ms[p] / s.timed_steps : 0;
    if (epoch % f.eval_every == 0 || epoch == f.epochs) {
      const Evaluation e = evaluate(*model, test_loader);
      fmt::print("Test set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n", e.loss / e.total,
                 e.correct, e.total, 100.0 * e.correct / e.total);
      j["test_loss"] = e.loss / e.total;
      j["test_accuracy"] = static_cast<double>(e.correct) / e.total;
    }
    metrics.write(j);
    scheduler.step();
    pos.epoch = epoch;
    if (!f.checkpoint.empty()) save_checkpoint(f.checkpoint, *model, sgd, pos, info);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a model on one node with ringflow"};
  Flags f;
  const auto above0 = bound(0, false), at_least0 = bound(0, true);
  app.add_option("--model", f.model, "model name")->capture_default_str()
      ->check(CLI::IsMember(models::model_names()));
  app.add_option("--dataset", f.dataset, "data set")->capture_default_str()
      ->check(CLI::IsMember({"fashion-mnist", "cifar10", "synthetic"}));
  app.add_option("--data-dir", f.data_dir, "folder of the data set's files (default: "
                 "/usr/share/datasets/fashion-mnist, data/cifar-10-batches-bin)");
  app.add_option("--epochs", f.epochs, "passes over the training set")->capture_default_str()->check(above0);
  app.add_option("--batch-size", f.batch_size, "images per step")->capture_default_str()->check(above0);
  app.add_option("--lr", f.lr, "SGD learning rate")->capture_default_str()->check(above0);
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", f.weight_decay, "SGD weight decay")->capture_default_str()->check(at_least0);
  app.add_option("--schedule", f.schedule, "learning-rate schedule over the epochs")->capture_default_str()
      ->check(CLI::IsMember({"none", "step", "multistep", "cosine"}));
  app.add_option("--warmup-epochs", f.warmup_epochs, "linear warm-up epochs before the schedule")
      ->capture_default_str()->check(at_least0);
  app.add_option("--threads", f.threads, "CPU threads (0: all cores)")->capture_default_str()->check(at_least0);
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
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const std::exception& e) {
    fmt::print(stderr, "train: {}\n", e.what());
    return 1;
  }
}
