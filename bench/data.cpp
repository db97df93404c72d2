// data: images/s of ringflow's image loader against torchvision's, on the same files with the
// same number of workers, in one run; then the loader feeding a training step (ResNet-50).
//
// Both sides read DIR/train (an image folder: bench/make_images.py writes one) with
// torchvision's ImageNet training recipe: decode, RandomResizedCrop(--image-size),
// RandomHorizontalFlip, ToTensor + Normalize, batches of --batch-size, shuffled.
//   ringflow: ImageFolder + DataLoader with --workers threads and 2 batches prefetched per
//     worker; once as train runs it (JPEGs decoded at 1/2, 1/4 or 1/8 of their size where the
//     crop is that much larger than the output: image_transform.h) and once decoding every
//     file at full size (PIL's pixels exactly);
//   torchvision: bench/torch_data.py, ImageFolder + DataLoader with --workers processes and
//     prefetch_factor 2, run with Debian's /usr/bin/python3.
// Check first: the val recipe (Resize + CenterCrop) of the first images, full-size decode,
// must be within 1 grey level of torchvision's, else the run stops. Then --repeats rounds,
// each timing the three loaders one after the other over --batches batches after --warmup
// (a fresh loader each); the table gives the medians and the ratio of medians.
//
// The training step: --model (default resnet50) on the loader's batches for --train-steps
// steps after one, SGD; "data wait" is the time next() blocked, as train's phase table has it.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/framework/ringflow.h"
#include "ringflow/models/registry.h"

using namespace ringflow;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  std::string data_dir;
  int workers = 2;
  int64_t batch_size = 64;
  int batches = 20, warmup = 2, repeats = 3;
  int image_size = 224;
  std::string python = "/usr/bin/python3";
  std::string torch_script = RINGFLOW_SOURCE_ROOT "/bench/torch_data.py";
  std::string model = "resnet50";
  int train_steps = 3;
  int64_t train_batch = 16;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The output of `cmd` (its status non-zero: nullopt, with the output on stderr).
std::optional<std::string> run(const std::string& cmd) {
  std::fflush(stdout);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (::pclose(p) != 0) {
    fmt::print(stderr, "data: `{}` failed:\n{}\n", cmd, out);
    return std::nullopt;
  }
  return out;
}

std::shared_ptr<data::ImageFolder> folder(const Flags& f, bool train, bool reduce) {
  return data::ImageFolder::open(
      f.data_dir, train,
      std::make_shared<data::ImageTransform>(data::ImageTransform::preset("imagenet", train, f.image_size)),
      {.reduce_on_decode = reduce});
}

// The val recipe before Normalize, full-size decode, against torchvision's: the largest
// difference in grey levels over the first `count` images.
double check_against_torchvision(const Flags& f, int count) {
  const std::string file = fmt::format("/tmp/ringflow_bench_data_{}.bin", ::getpid());
  if (!run(fmt::format("{} '{}' --data-dir '{}' --image-size {} --check '{}' --check-count {}", f.python,
                       f.torch_script, f.data_dir, f.image_size, file, count)))
    throw std::runtime_error("the torchvision check did not run (python3-torchvision installed?)");
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> theirs((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(file.c_str());
  data::ImageTransformOptions o = data::ImageTransform::preset("imagenet", false, f.image_size).options();
  o.mean = {0, 0, 0};
  o.std = {1, 1, 1};
  const data::ImageTransform t(o);
  const auto images = folder(f, true, false);
  const size_t numel = size_t(3) * f.image_size * f.image_size;
  if (theirs.size() != numel * count) throw std::runtime_error("the torchvision check wrote the wrong size");
  double worst = 0;
  std::vector<float> ours(numel);
  for (int i = 0; i < count; ++i) {
    Generator gen(0);
    data::read_image_example(data::read_file_bytes(images->file(i)), images->file(i), t,
                             {.reduce_on_decode = false}, gen, ours.data());
    for (size_t k = 0; k < numel; ++k) worst = std::max(worst, std::abs(ours[k] * 255.0 - theirs[i * numel + k]));
  }
  return worst;
}

// ringflow's loader: images/s over f.batches batches after f.warmup.
double time_ours(const Flags& f, bool reduce, int round) {
  data::DataLoader loader(folder(f, true, reduce),
                          {.batch_size = f.batch_size, .drop_last = true, .seed = uint64_t(round),
                           .num_workers = f.workers, .prefetch_batches = std::max(1, f.workers) * 2});
  loader.start_epoch(round);
  data::Batch b;
  for (int i = 0; i < f.warmup; ++i) loader.next(b);
  const auto start = Clock::now();
  for (int i = 0; i < f.batches; ++i)
    if (!loader.next(b)) throw std::runtime_error("data: too few images for --warmup + --batches batches");
  return f.batches * f.batch_size / seconds_since(start);
}

std::optional<double> time_torchvision(const Flags& f) {
  const auto out = run(fmt::format("{} '{}' --data-dir '{}' --workers {} --batch-size {} --batches {} --warmup {} "
                                   "--repeats 1 --image-size {}", f.python, f.torch_script, f.data_dir, f.workers,
                                   f.batch_size, f.batches, f.warmup, f.image_size));
  if (!out) return std::nullopt;
  return nlohmann::json::parse(out->substr(out->rfind('{')))["images_per_s"][0].get<double>();
}

// The loader feeding f.model's training steps: (data wait, step) seconds summed after the first.
std::pair<double, double> feed_training(const Flags& f) {
  auto train = folder(f, true, true);
  manual_seed(0);
  nn::ModulePtr model = models::make_model(f.model, train->num_classes());
  optim::SGD sgd(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  data::DataLoader loader(train, {.batch_size = f.train_batch, .drop_last = true, .num_workers = f.workers,
                                  .prefetch_batches = std::max(1, f.workers) * 2});
  loader.start_epoch(1);
  data::Batch b;
  double wait = 0, total = 0;
  for (int step = 0; step <= f.train_steps; ++step) {
    const auto start = Clock::now();
    if (!loader.next(b)) throw std::runtime_error("data: too few images for --train-steps");
    const double waited = seconds_since(start);
    cross_entropy((*model)(b.images), b.labels).backward();
    sgd.step();
    sgd.zero_grad();
    if (step > 0) {  // the first pays for first-touch allocations and the workers' start
      wait += waited;
      total += seconds_since(start);
    }
  }
  return {wait, total};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Image loading: ringflow's ImageFolder + DataLoader against torchvision's, same files and workers"};
  Flags f;
  app.add_option("--data-dir", f.data_dir, "an image folder (DIR/train/<class>/*.jpg; bench/make_images.py)")
      ->required();
  app.add_option("--workers", f.workers, "loader threads (ringflow) and processes (torchvision)")->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "images per batch")->capture_default_str();
  app.add_option("--batches", f.batches, "batches timed per round")->capture_default_str();
  app.add_option("--warmup", f.warmup, "batches before the timing")->capture_default_str();
  app.add_option("--repeats", f.repeats, "rounds; the table gives medians")->capture_default_str();
  app.add_option("--image-size", f.image_size, "RandomResizedCrop's size")->capture_default_str();
  app.add_option("--python", f.python, "the Python with torchvision")->capture_default_str();
  app.add_option("--torch-script", f.torch_script, "bench/torch_data.py")->capture_default_str();
  app.add_option("--model", f.model, "the model the loader feeds")->capture_default_str();
  app.add_option("--train-steps", f.train_steps, "training steps timed after one (0: none)")->capture_default_str();
  app.add_option("--train-batch", f.train_batch, "their batch size")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const double worst = check_against_torchvision(f, 4);
    fmt::print("check: Resize + CenterCrop of 4 images within {} grey levels of torchvision's\n", worst);
    if (worst > 1) return 1;
    std::vector<double> reduced, full, torch;
    for (int r = 0; r < f.repeats; ++r) {
      reduced.push_back(time_ours(f, true, r));
      full.push_back(time_ours(f, false, r));
      if (const auto t = time_torchvision(f)) torch.push_back(*t);
      fmt::print("round {}: ringflow {:.0f}, ringflow full-size decode {:.0f}, torchvision {} images/s\n", r + 1,
                 reduced.back(), full.back(), torch.size() == size_t(r + 1) ? fmt::format("{:.0f}", torch.back()) : "-");
    }
    fmt::print("\n{} workers, batches of {}, RandomResizedCrop({}) + flip + normalise; medians of {} rounds:\n",
               f.workers, f.batch_size, f.image_size, f.repeats);
    const double t = torch.empty() ? 0 : median(torch);
    for (const auto& [name, v] : {std::pair{"ringflow", reduced}, std::pair{"ringflow, full-size decode", full}})
      fmt::print("  {:28} {:8.0f} images/s{}\n", name, median(v),
                 t > 0 ? fmt::format("  ({:.2f}x torchvision)", median(v) / t) : "");
    if (t > 0) fmt::print("  {:28} {:8.0f} images/s\n", "torchvision", t);
    if (f.train_steps > 0) {
      const auto [wait, total] = feed_training(f);
      fmt::print("\n{} training steps of {} images ({} workers): {:.0f} ms/step, data wait {:.1f} ms/step ({:.1f}%)\n",
                 f.train_steps, f.train_batch, f.workers, total / f.train_steps * 1e3, wait / f.train_steps * 1e3,
                 100 * wait / total);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "data: {}\n", e.what());
    return 1;
  }
  return 0;
}
