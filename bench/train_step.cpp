// train_step: one training step of a registered model (VGG-11 and ResNet-18 CIFAR, the small
// CNN) timed phase by phase, side by side with the same step in PyTorch, in one run.
//
// ringflow's step is apps/train.cpp's: forward (model + cross_entropy), backward,
// sgd.step() + sgd.zero_grad() (fp16: through a GradScaler, on both sides); SGD lr 0.01,
// momentum 0.9, weight decay 5e-4; activations in --memory-format (PyTorch's model and input
// channels_last for nhwc, else its default NCHW; --torch-channels-last adds a PyTorch
// channels_last column); --cuda-graphs on|both replays ringflow's step from a CUDA graph
// captured after the warm-up (framework/graphed_step.h; both: a column of its own); synthetic
// input (normal) and labels made once per row; times are medians over --steps after
// --warmup steps, and --rounds alternate ringflow with both PyTorch runs, each keeping its
// fastest round (other load on the machine then costs one round, not the ratio). GFLOP per step counts the conv and linear layers only: 2 * MACs per image
// forward, x3 for forward + backward (table below, from the layer shapes, checked against
// the model's own Conv2d/Linear weights). --device cuda runs both sides on the GPU, each
// phase ending in a device synchronisation (--tf32 allows TF32 on both). The machine ceiling is raw oneDNN dnnl_sgemm
// 2048^3 measured at the start of the run (bench/ceiling.h). Winograd convolutions (--conv-algo
// auto, AVX-512) do fewer multiplications than these direct-convolution counts, so the
// GFLOP/s column is then "effective" and can pass 100% of the ceiling.
//
// PyTorch: bench/torch_reference.py (same models, threads, synthetic data and optimizer) run
// by Debian's /usr/bin/python3 (--python), on the CPU in a process per run and twice: as
// installed, and with GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
// (glibc then stops unmapping its large buffers every step); the ratio is ringflow's step time
// over the faster of the two. On a GPU one process answers every run (TorchReference).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "ringflow/apps/choices.h"
#include "ringflow/bench/ceiling.h"
#include "ringflow/bench/command_output.h"
#include "ringflow/framework/op_profile.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/kernels/cudnn_choices.h"
#include "ringflow/models/registry.h"
#include "ringflow/models/vgg.h"

using namespace ringflow;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTunable = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736";

// --cuda-graphs: ringflow's step eager, replayed from a graph, or both (a column of its own).
enum class CudaGraphs { off, on, both };
const ringflow::apps::Choices<CudaGraphs> kCudaGraphs = {
    {"off", CudaGraphs::off}, {"on", CudaGraphs::on}, {"both", CudaGraphs::both}};

// --torch-processes: PyTorch's runs each in a process of their own, or all in one.
enum class TorchProcesses { automatic, one, per_run };
const ringflow::apps::Choices<TorchProcesses> kTorchProcesses = {
    {"auto", TorchProcesses::automatic}, {"one", TorchProcesses::one}, {"per-run", TorchProcesses::per_run}};

struct Flags {
  std::vector<std::string> models;
  std::vector<int64_t> batches;
  std::vector<DType> precisions{DType::f32};
  int threads = 0;
  int steps = 10;
  int warmup = 2;
  int rounds = 2;
  ConvAlgorithm conv_algo = ConvAlgorithm::automatic;
  Device device = Device::cpu();
  MemoryFormat memory_format = MemoryFormat::automatic;
  CudaGraphs cuda_graphs = CudaGraphs::off;
  bool torch_channels_last = false;
  bool tf32 = false;
  int64_t cudnn_workspace_mb = 1024;
  bool no_torch = false;
  TorchProcesses torch_processes = TorchProcesses::automatic;
  bool profile_ops = false;
  bool profile_shapes = false;
  bool json = false;
  std::string python = "/usr/bin/python3";
  std::string torch_script = RINGFLOW_SOURCE_ROOT "/bench/torch_reference.py";
};

// ---------------------------------------------------------------- FLOPs
// Per image: multiply-accumulates of the conv and linear layers, and the elements of their
// weights (the check against the model).
struct LayerCount {
  double macs = 0;
  int64_t weight_elems = 0;
  void conv(int64_t cin, int64_t cout, int64_t k, int64_t out_hw) {
    macs += double(out_hw) * out_hw * cout * cin * k * k;
    weight_elems += cout * cin * k * k;
  }
  void linear(int64_t in, int64_t out) {
    macs += double(in) * out;
    weight_elems += in * out;
  }
};

LayerCount count_layers(const std::string& name) {
  LayerCount c;
  if (name == "vgg11_cifar") {  // 3x3 pad-1 convs, 0 = 2x2 max-pool; 32x32 in, 1x1 out
    int64_t hw = 32, cin = 3;
    for (int64_t v : models::vgg_config(11)) {
      if (v == 0) {
        hw /= 2;
      } else {
        c.conv(cin, v, 3, hw);
        cin = v;
      }
    }
    c.linear(512, 10);
  } else if (name == "resnet18_cifar") {  // BasicBlock x [2, 2, 2, 2]
    c.conv(3, 64, 3, 32);
    int64_t hw = 32, in = 64;
    for (const auto& [planes, stride] : std::vector<std::pair<int64_t, int64_t>>{{64, 1}, {128, 2}, {256, 2}, {512, 2}}) {
      for (int b = 0; b < 2; ++b) {
        const int64_t s = b == 0 ? stride : 1;
        hw /= s;
        c.conv(in, planes, 3, hw);      // conv1 (stride s)
        c.conv(planes, planes, 3, hw);  // conv2
        if (s != 1 || in != planes) c.conv(in, planes, 1, hw);  // shortcut
        in = planes;
      }
    }
    c.linear(512, 10);
  } else if (name == "resnet50") {  // torchvision's: Bottleneck x [3, 4, 6, 3], stride on the 3x3
    c.conv(3, 64, 7, 112);
    int64_t hw = 56, in = 64;  // after the 3x3 stride-2 max-pool
    for (const auto& [planes, blocks, stride] : std::vector<std::tuple<int64_t, int, int64_t>>{
             {64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}}) {
      for (int b = 0; b < blocks; ++b) {
        const int64_t s = b == 0 ? stride : 1, out_hw = hw / s;
        c.conv(in, planes, 1, hw);                       // conv1
        c.conv(planes, planes, 3, out_hw);               // conv2 (stride s)
        c.conv(planes, 4 * planes, 1, out_hw);           // conv3
        if (b == 0) c.conv(in, 4 * planes, 1, out_hw);   // downsample
        in = 4 * planes;
        hw = out_hw;
      }
    }
    c.linear(2048, 1000);
  } else if (name == "small_cnn") {  // 28x28 conv, pool, 14x14 conv, pool, fc
    c.conv(1, 16, 3, 28);
    c.conv(16, 32, 3, 14);
    c.linear(32 * 7 * 7, 10);
  } else {
    throw std::invalid_argument(fmt::format(
        "--models: no FLOP table for '{}' (choices: vgg11_cifar, resnet18_cifar, resnet50, small_cnn)", name));
  }
  return c;
}

// Elements of the model's Conv2d and Linear weights.
int64_t model_weight_elems(nn::Module& model) {
  int64_t n = 0;
  for (const auto& [name, m] : model.named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) n += conv->weight.numel();
    if (auto* lin = dynamic_cast<nn::Linear*>(m)) n += lin->weight.numel();
  }
  return n;
}

// ---------------------------------------------------------------- timing
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The ops of `steps` profiled steps (framework/op_profile.h), per step, the costliest first.
void print_op_times(const std::string& what, int steps) {
  const std::vector<OpTime> ops = op_times();
  double total = 0;
  for (const OpTime& o : ops) total += o.total_ms;
  fmt::print("ops of {}, per step, each waited for ({} steps; sum {:.1f} ms/step):\n", what, steps, total / steps);
  fmt::print("  {:>7} {:>9} {:>6}  {}\n", "calls", "ms", "share", "op");
  for (const OpTime& o : ops)
    fmt::print("  {:>7} {:>9.2f} {:>5.1f}%  {}\n", o.calls / steps, o.total_ms / steps, 100 * o.total_ms / total,
               o.op);
  std::fflush(stdout);
}

struct Phases {
  double forward = 0, backward = 0, optimizer = 0, step = 0;
};

// --precision's names, as train's and bench/torch_reference.py's.
const ringflow::apps::Choices<DType> kPrecisions = {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};

const std::string& precision_name(DType precision) { return ringflow::apps::name_of(kPrecisions, precision); }

Phases time_ringflow(const std::string& name, int64_t batch, DType precision, const Flags& f, bool graphs) {
  const Device device = f.device;
  Generator gen(0);
  nn::ModulePtr model = models::make_model(name, 0, {.gen = &gen});
  model->train();
  model->to(device);
  const LayerCount count = count_layers(name);
  if (model_weight_elems(*model) != count.weight_elems)
    throw std::logic_error(fmt::format("{}: the FLOP table has {} conv/linear weights, the model {}", name,
                                       count.weight_elems, model_weight_elems(*model)));
  Shape shape{batch};
  for (int64_t d : models::model_input_shape(name)) shape.push_back(d);
  const Tensor x = randn(shape, &gen).to(device);
  std::vector<double> labels(batch);
  for (double& l : labels) l = double(gen.next_u64() % 10);
  const Tensor y = from_vector(labels, {batch}, DType::i64).to(device);
  // Kernels run asynchronously on a GPU: each phase ends when its work has.
  const auto now = [&] {
    synchronize(device);
    return Clock::now();
  };
  optim::SGD sgd(model->parameters(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4});
  std::optional<optim::GradScaler> scaler;  // fp16: apps/train's dynamic loss scaling
  if (precision == DType::f16) scaler.emplace();

  // One step; ms[0..2]: forward, backward, optimizer.
  const auto run_step = [&](double* ms) {
    const auto start = now();
    {
      Tensor loss;
      {
        std::optional<AutocastGuard> amp;  // apps/train's --precision
        if (precision != DType::f32) amp.emplace(precision);
        loss = cross_entropy((*model)(x), y);
      }
      const auto forward_end = now();
      ms[0] = ms_between(start, forward_end);
      (scaler ? scaler->scale(loss) : loss).backward();
      ms[1] = ms_between(forward_end, now());
    }
    const auto t = now();
    if (scaler) {
      scaler->step(sgd);
      scaler->update();
    } else {
      sgd.step();
    }
    sgd.zero_grad();
    ms[2] = ms_between(t, now());
  };
  if (graphs) {
    // Forward and backward captured, and SGD's step too unless a grad scaler reads its inf
    // flag on the host (then the step runs eagerly after each replay); only whole steps timed.
    const bool whole = !scaler;
    const int warmup = std::max(f.warmup, 1);  // SGD's momentum buffers exist before the capture
    GraphedStep graphed(
        device, warmup,
        [&] {
          Tensor loss;
          {
            std::optional<AutocastGuard> amp;
            if (precision != DType::f32) amp.emplace(precision);
            loss = cross_entropy((*model)(x), y);
          }
          (scaler ? scaler->scale(loss) : loss).backward();
          if (whole) {
            sgd.step();
            sgd.zero_grad();
          }
        },
        model->parameters(), [](const std::string& line) { fmt::print("{}\n", line); });
    std::vector<double> step;
    for (int i = 0; i <= warmup + f.steps; ++i) {  // call `warmup` captures: not timed
      const auto start = now();
      graphed.run();
      if (!whole) {
        scaler->step(sgd);
        scaler->update();
        sgd.zero_grad();
      }
      if (i > warmup) step.push_back(ms_between(start, now()));
    }
    return {NAN, NAN, NAN, median(step)};
  }
  std::vector<double> fwd, bwd, opt, step;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    const auto start = now();
    double ms[3];
    run_step(ms);
    const double total = ms_between(start, now());
    if (i < f.warmup) continue;
    fwd.push_back(ms[0]);
    bwd.push_back(ms[1]);
    opt.push_back(ms[2]);
    step.push_back(total);
  }
  if (f.profile_ops) {
    constexpr int kSteps = 3;
    reset_op_times();
    set_op_profiling(true, f.profile_shapes);
    double ms[3];
    for (int i = 0; i < kSteps; ++i) run_step(ms);
    set_op_profiling(false);
    print_op_times(fmt::format("{} batch {} {}", name, batch, precision_name(precision)), kSteps);
    // What cuDNN runs for each shape so far: whether convolutions reach tensor-core kernels,
    // and how batch norm runs on channels-last.
    for (const std::string& line : cudnn_conv_choices()) fmt::print("  cudnn conv {}\n", line);
    for (const std::string& line : cudnn_batch_norm_choices()) fmt::print("  cudnn batch norm {}\n", line);
  }
  return {median(fwd), median(bwd), median(opt), median(step)};
}

// PyTorch's side: bench/torch_reference.py --serve, asked for one run at a time. On a GPU one
// process answers every run of the row list (its start, the imports and CUDA's context and
// libraries, is paid once); on the CPU each run has a process of its own, as each had before:
// glibc's heap would otherwise carry over from run to run (--torch-processes).
class TorchReference {
 public:
  TorchReference(const Flags& f, bool tunable)
      : f_(f), tunable_(tunable),
        one_(f.torch_processes == TorchProcesses::one ||
             (f.torch_processes == TorchProcesses::automatic && f.device.is_cuda())) {}

  // The run's JSON answer, or nullopt (the reason on stderr).
  std::optional<nlohmann::json> run(const std::string& name, int64_t batch, DType precision, bool channels_last) {
    const std::string layout = channels_last ? "channels_last" : "contiguous";
    const std::string request = fmt::format(
        "--model {} --batch {} --precision {} --threads {} --steps {} --warmup {} --device {}{} --memory-format {}",
        name, batch, precision_name(precision), num_threads(), f_.steps, f_.warmup, f_.device.str(),
        f_.tf32 ? " --tf32" : "", layout);
    if (!server_)
      server_.emplace(fmt::format("{}{} '{}' --serve", tunable_ ? fmt::format("env GLIBC_TUNABLES={} ", kTunable) : "",
                                  f_.python, f_.torch_script),
                      "train_step");
    if (f_.device.is_cuda()) cuda_empty_cache();  // ringflow's cached blocks go back to the device for PyTorch
    bool healthy = true;
    std::optional<nlohmann::json> answer = ask(request, healthy);
    // An answer to another run than asked (a line of PyTorch's own that looked like JSON) would
    // shift every later answer by one.
    if (answer && (answer->value("model", "") != name || answer->value("batch", int64_t{-1}) != batch ||
                   answer->value("precision", "") != precision_name(precision) ||
                   answer->value("memory_format", "") != layout)) {
      fmt::print(stderr, "train_step: PyTorch answered `{}` with another run: {}\n", request, answer->dump());
      answer.reset();
      healthy = false;
    }
    if (!healthy || !one_) server_.reset();  // a server that failed is started anew
    return answer;
  }

 private:
  const Flags& f_;
  bool tunable_;
  bool one_;  // one process for every run
  std::optional<bench::Coprocess> server_;

  // The answer, or nullopt; `healthy` false where the server ended or answered other than JSON.
  std::optional<nlohmann::json> ask(const std::string& request, bool& healthy) {
    healthy = false;
    if (!server_->send(request)) return std::nullopt;
    while (std::optional<std::string> line = server_->read_line()) {
      if (!line->starts_with('{')) {  // PyTorch's own chatter: passed on
        fmt::print(stderr, "{}\n", *line);
        continue;
      }
      try {
        nlohmann::json j = nlohmann::json::parse(*line);
        healthy = true;
        if (!j.contains("error")) return j;
        fmt::print(stderr, "train_step: PyTorch's run `{}` failed: {}\n", request, j["error"].get<std::string>());
      } catch (const std::exception& e) {
        fmt::print(stderr, "train_step: PyTorch's run `{}`: bad JSON ({}): {}\n", request, e.what(), *line);
      }
      return std::nullopt;
    }
    return std::nullopt;
  }
};

struct Row {
  std::string model;
  int64_t batch = 0;
  DType precision = DType::f32;
  double gflop = 0;  // per step, forward + backward
  Phases rf;
  double graphed_ms = NAN;  // --cuda-graphs both: ringflow's step replayed from a graph
  std::optional<nlohmann::json> torch, torch_tunable, torch_cl;
  // Wall seconds of each contender over every round, set-up and searches included (on a GPU,
  // cuDNN's algorithm searches make most of them).
  nlohmann::json wall_s = nlohmann::json::object();
};

// Runs f() and adds its wall seconds to wall[name].
template <class F>
auto timed(nlohmann::json& wall, const char* name, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  auto result = f();
  wall[name] = wall.value(name, 0.0) + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

double torch_step_ms(const std::optional<nlohmann::json>& j) {
  return j ? j->at("step_ms").get<double>() : NAN;
}

void keep_faster(std::optional<nlohmann::json>& best, std::optional<nlohmann::json> round) {
  if (round && (!best || torch_step_ms(round) < torch_step_ms(best))) best = std::move(round);
}

double best_torch_ms(const Row& r) {
  const double a = torch_step_ms(r.torch), b = torch_step_ms(r.torch_tunable);
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  return std::min(a, b);
}

std::string fmt_ms(double ms) { return std::isnan(ms) ? std::string("-") : fmt::format("{:.1f}", ms); }
std::string fmt_ratio(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::string("-") : fmt::format("{:.3f}", a / b);
}

void print_header(double ceiling, const Flags& f) {
  fmt::print("device {}{}  threads {}  ceiling (raw oneDNN dnnl_sgemm 2048^3) {:.0f} GFLOP/s  steps {} after warmup {}, "
             "best of {} alternating round(s)  (times: median ms of the best round)  memory format {} "
             "(PyTorch: {})  convolutions: {}{}\n",
             f.device.str(), f.tf32 ? " (TF32 allowed)" : "", num_threads(), ceiling, f.steps, f.warmup, f.rounds,
             memory_format_name(f.memory_format), f.memory_format == MemoryFormat::nhwc ? "channels_last" : "contiguous",
             f.device.is_cpu() ? conv_algorithm_name(f.conv_algo) : "cuDNN",
             f.device.is_cpu() && f.conv_algo == ConvAlgorithm::automatic
                 ? " (GFLOP/s counts direct-convolution FLOPs)" : "");
  fmt::print("{:<15} {:>5} {:>5} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>6} | {:>10} {:>10} {:>7}", "model", "batch", "prec", "fwd",
             "bwd", "optim", "step", "img/s", "GFLOP/s", "%ceil", "torch", "torch+tun", "rf/best");
  if (f.cuda_graphs == CudaGraphs::both) fmt::print(" | {:>9} {:>8}", "graphed", "g/best");
  if (f.torch_channels_last) fmt::print(" | {:>9} {:>8}", "torch cl", "rf/cl");
  fmt::print("\n");
}

void print_row(const Row& r, double ceiling, const Flags& f) {
  const double g = r.gflop / (r.rf.step / 1e3);
  const double best = best_torch_ms(r);
  fmt::print("{:<15} {:>5} {:>5} {:>8.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>8.0f} {:>8.1f} {:>5.0f}% | {:>10} {:>10} {:>7}",
             r.model, r.batch, precision_name(r.precision), r.rf.forward, r.rf.backward, r.rf.optimizer, r.rf.step,
             r.batch / (r.rf.step / 1e3), g, 100 * g / ceiling, fmt_ms(torch_step_ms(r.torch)),
             fmt_ms(torch_step_ms(r.torch_tunable)),
             std::isnan(best) ? std::string("-") : fmt::format("{:.3f}", r.rf.step / best));
  if (f.cuda_graphs == CudaGraphs::both) fmt::print(" | {:>9} {:>8}", fmt_ms(r.graphed_ms), fmt_ratio(r.graphed_ms, best));
  if (f.torch_channels_last)
    fmt::print(" | {:>9} {:>8}", fmt_ms(torch_step_ms(r.torch_cl)), fmt_ratio(r.rf.step, torch_step_ms(r.torch_cl)));
  fmt::print("\n");
  std::fflush(stdout);
}

void print_json(const Row& r, double ceiling, const Flags& f) {
  const double g = r.gflop / (r.rf.step / 1e3);
  const double best = best_torch_ms(r);
  nlohmann::json j{{"model", r.model},
                   {"batch", r.batch},
                   {"precision", precision_name(r.precision)},
                   {"threads", num_threads()},
                   {"device", f.device.str()},
                   {"tf32", f.tf32},
                   {"cudnn_workspace_mb", f.cudnn_workspace_mb},
                   {"memory_format", memory_format_name(f.memory_format)},
                   {"cuda_graphs", ringflow::apps::name_of(kCudaGraphs, f.cuda_graphs)},
                   {"graphed_step_ms", std::isnan(r.graphed_ms) ? nlohmann::json() : nlohmann::json(r.graphed_ms)},
                   {"torch_channels_last", r.torch_cl ? *r.torch_cl : nlohmann::json()},
                   {"steps", f.steps},
                   {"warmup", f.warmup},
                   {"rounds", f.rounds},
                   {"gflop_per_step", r.gflop},
                   {"ceiling_gflops", std::isnan(ceiling) ? nlohmann::json() : nlohmann::json(ceiling)},
                   {"forward_ms", r.rf.forward},
                   {"backward_ms", r.rf.backward},
                   {"optimizer_ms", r.rf.optimizer},
                   {"step_ms", r.rf.step},
                   {"images_per_s", r.batch / (r.rf.step / 1e3)},
                   {"gflops", g},
                   {"pct_ceiling", std::isnan(ceiling) ? nlohmann::json() : nlohmann::json(100 * g / ceiling)},
                   {"torch", r.torch ? *r.torch : nlohmann::json()},
                   {"torch_malloc_tunable", r.torch_tunable ? *r.torch_tunable : nlohmann::json()},
                   {"ratio_over_best_torch", std::isnan(best) ? nlohmann::json() : nlohmann::json(r.rf.step / best)},
                   {"wall_s", r.wall_s}};
  fmt::print("{}\n", j.dump());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"train_step: ringflow's training step vs PyTorch's (forward, backward, optimizer)"};
  app.add_option("--models", f.models, "models (default: vgg11_cifar resnet18_cifar small_cnn)");
  app.add_option("--batches", f.batches, "batch sizes (default: 64 256 for VGG/ResNet, 256 for small_cnn)");
  app.add_option("--precision", f.precisions, "fp32, bf16 and/or fp16 (autocast, as train --precision; "
                 "fp16 with a grad scaler; PyTorch under torch.autocast), each a row")->default_str("fp32")
      ->transform(ringflow::apps::choice_of(kPrecisions));
  app.add_option("--threads", f.threads, "CPU threads, for both (0: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", f.steps, "timed steps per row")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--rounds", f.rounds, "rounds alternating ringflow and PyTorch; each side keeps its fastest")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  const ConvAlgorithm algorithms[] = {ConvAlgorithm::automatic, ConvAlgorithm::direct};
  ringflow::apps::add_choice(app, "--conv-algo", f.conv_algo,
                             ringflow::apps::choices_from(algorithms, conv_algorithm_name),
                             "ringflow's CPU convolutions: auto (Winograd where faster: oneDNN's "
                             "in f32 with AVX-512, ours in f32 with AVX2 only and in bf16 "
                             "without AMX) or direct");
  app.add_option_function<std::string>(
         "--device",
         [&f](const std::string& v) {
           try {
             f.device = Device::parse(v);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--device", e.what());
           }
         },
         "cpu, cuda or cuda:N, for both")
      ->default_str("cpu");
  ringflow::apps::add_choice(app, "--memory-format", f.memory_format,
                             ringflow::apps::choices_from(kMemoryFormats, memory_format_name),
                             "ringflow's activations between layers (as train --memory-format); PyTorch's "
                             "model and input are channels_last for nhwc, else contiguous");
  ringflow::apps::add_choice(app, "--cuda-graphs", f.cuda_graphs, kCudaGraphs,
                             "ringflow's step captured as a CUDA graph after the warm-up and replayed "
                             "(on: instead of eager steps; both: a column of its own)");
  app.add_flag("--torch-channels-last", f.torch_channels_last, "also PyTorch with model and input "
               "channels_last: a column of its own");
  app.add_flag("--tf32", f.tf32, "CUDA: f32 matmuls and convolutions on TF32 tensor cores, for both");
  app.add_option("--cudnn-workspace-mb", f.cudnn_workspace_mb,
                 "CUDA: the workspace ringflow's cuDNN convolutions may use per call, MiB (PyTorch's "
                 "takes what memory allows)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-torch", f.no_torch, "skip PyTorch");
  ringflow::apps::add_choice(app, "--torch-processes", f.torch_processes, kTorchProcesses,
                             "PyTorch's runs in one process (its start paid once) or a process per run "
                             "(auto: one on a GPU, per-run on the CPU, where glibc's heap would carry over)");
  CLI::Option* profile = app.add_flag("--profile-ops", f.profile_ops,
                                      "after each row, 3 more steps with each kernel waited for: time per op");
  app.add_flag("--profile-shapes", f.profile_shapes,
               "--profile-ops per op and operand shapes (which layer), not per op alone")
      ->needs(profile);
  app.add_flag("--json", f.json, "one JSON object per row");
  app.add_option("--python", f.python, "the Python that runs PyTorch")->capture_default_str();
  app.add_option("--torch-script", f.torch_script, "bench/torch_reference.py")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (f.threads > 0) set_num_threads(f.threads);
    set_conv_algorithm(f.conv_algo);
    set_memory_format(f.memory_format);
    const Device device = f.device;
    if (device.is_cuda()) {
      std::string why;
      const int count = cuda_device_count(&why);
      if (device.index >= count)
        throw std::invalid_argument(fmt::format("--device {}: {} CUDA device(s) here{}", f.device.str(), count,
                                                count == 0 ? " (" + why + ")" : ""));
      set_allow_tf32(f.tf32);
      set_cudnn_workspace_limit(static_cast<size_t>(f.cudnn_workspace_mb) << 20);
    }
    std::vector<std::pair<std::string, int64_t>> rows;
    if (f.models.empty() && f.batches.empty()) {
      rows = {{"vgg11_cifar", 64}, {"vgg11_cifar", 256}, {"resnet18_cifar", 64}, {"resnet18_cifar", 256},
              {"small_cnn", 256}};
    } else {
      if (f.models.empty()) f.models = {"vgg11_cifar", "resnet18_cifar", "small_cnn"};
      if (f.batches.empty()) f.batches = {64, 256};
      for (const std::string& m : f.models)
        for (int64_t b : f.batches) rows.emplace_back(m, b);
    }
    for (const auto& [m, b] : rows) count_layers(m);  // unknown names fail before any timing
    if (!f.no_torch && !std::ifstream(f.torch_script))
      throw std::invalid_argument(fmt::format("--torch-script {}: no such file", f.torch_script));

    // The CPU's sgemm ceiling means nothing for a GPU run: NaN there prints as "nan%".
    const double ceiling = device.is_cpu() ? bench::sgemm_ceiling_gflops() : NAN;
    if (!f.json) print_header(ceiling, f);
    TorchReference torch(f, /*tunable=*/false), torch_tunable(f, /*tunable=*/true);
    for (const auto& [m, b] : rows) {
      for (const DType prec : f.precisions) {
        Row r;
        r.model = m;
        r.batch = b;
        r.precision = prec;
        r.gflop = 3 * 2 * count_layers(m).macs * double(b) / 1e9;
        // Rounds alternate the contenders so that a burst of other load hits one round of
        // each rather than all of one; each keeps its fastest round.
        for (int round = 0; round < f.rounds; ++round) {
          const Phases rf = timed(r.wall_s, "ringflow", [&] {
            return time_ringflow(m, b, prec, f, /*graphs=*/f.cuda_graphs == CudaGraphs::on);
          });
          if (round == 0 || rf.step < r.rf.step) r.rf = rf;
          if (f.cuda_graphs == CudaGraphs::both) {
            const double g = timed(r.wall_s, "graphed", [&] { return time_ringflow(m, b, prec, f, /*graphs=*/true).step; });
            if (std::isnan(r.graphed_ms) || g < r.graphed_ms) r.graphed_ms = g;
          }
          if (f.no_torch) continue;
          const bool cl = f.memory_format == MemoryFormat::nhwc;
          keep_faster(r.torch, timed(r.wall_s, "torch", [&] { return torch.run(m, b, prec, cl); }));
          // glibc's malloc settings matter for PyTorch's CPU tensors, not for CUDA's allocator.
          if (device.is_cpu())
            keep_faster(r.torch_tunable,
                        timed(r.wall_s, "torch_malloc_tunable", [&] { return torch_tunable.run(m, b, prec, cl); }));
          if (f.torch_channels_last)
            keep_faster(r.torch_cl,
                        timed(r.wall_s, "torch_channels_last", [&] { return torch.run(m, b, prec, true); }));
        }
        f.json ? print_json(r, ceiling, f) : print_row(r, ceiling, f);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_step: {}\n", e.what());
    return 1;
  }
  return 0;
}
