// step_memory: what one CPU training step costs in page faults, and whether ringflow's
// caching host allocator (kernels/cpu/allocator.h) keeps the kernel out of the loop.
//
// The step is a VGG-11-like CIFAR-10 front on random data (seeded), written with the
// functional API: conv3x3 3->64 @32x32, relu, maxpool2; conv3x3 64->128 @16x16, relu,
// maxpool2; conv3x3 128->256 @8x8, relu, maxpool2; flatten; linear 4096->10; cross_entropy;
// backward; in-place SGD under NoGradGuard (grads set to none). At batch 256 the first
// conv's output and its relu are 64 MiB each, as are their gradients. The input batch and
// labels are made once, before the loop. bench/step_memory.py is the same step in PyTorch.
//
// Per configuration, after --warmup steps, --steps steps are timed one by one:
//   ms/step        median wall time (min in brackets)
//   faults/step    getrusage(RUSAGE_SELF).ru_minflt delta over the timed steps / steps
//   sys_allocs     cpu_allocator_stats().large_system_allocs delta / steps: blocks >= 1 MiB
//                  the cache could not serve (each one a fresh malloc; glibc maps those over
//                  32 MiB with mmap and unmaps them on free, so they are faulted in again)
// Configurations (--cache): on = the caching allocator (the default), off = caching
// switched off with cpu_allocator_set_caching(false), so the same binary allocates like
// plain malloc. "both" runs on, then off, in this process; ratio is ms/step over the
// first configuration's. --probe also times malloc + memset + free of a 64 MiB block
// (glibc mmap/munmap) to give the cost of one minor fault on this machine.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "ringflow/apps/choices.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cpu/allocator.h"

using namespace ringflow;

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// PyTorch's default conv/linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Tensor param(const Shape& shape, int64_t fan_in, Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return rand(shape, &gen, DType::f32, -bound, bound).requires_grad_();
}

struct Net {
  std::vector<Tensor> p;  // w1 b1 w2 b2 w3 b3 fc_w fc_b
  explicit Net(Generator& gen) {
    const int64_t ch[] = {3, 64, 128, 256};
    for (int i = 0; i < 3; ++i) {
      p.push_back(param({ch[i + 1], ch[i], 3, 3}, ch[i] * 9, gen));
      p.push_back(param({ch[i + 1]}, ch[i] * 9, gen));
    }
    p.push_back(param({10, 256 * 4 * 4}, 256 * 4 * 4, gen));
    p.push_back(param({10}, 256 * 4 * 4, gen));
  }

  double step(const Tensor& x, const Tensor& y, double lr) {
    const auto pad1 = conv2d_params({1, 1}, {1, 1});
    const auto pool = pool2d_params({2, 2});
    Tensor h = x;
    for (int i = 0; i < 3; ++i) h = max_pool2d(relu(conv2d(h, p[2 * i], p[2 * i + 1], pad1)), pool);
    Tensor loss = cross_entropy(linear(flatten(h, 1), p[6], p[7]), y);
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& w : p) {
      w.add_(w.grad(), -lr);
      w.set_grad(Tensor());
    }
    return loss.item();
  }
};

struct Result {
  std::string config;
  double median_ms, min_ms, faults, sys_allocs, loss;
};

Result run(bool caching, int64_t batch, int steps, int warmup, uint64_t seed) {
  cpu_allocator_set_caching(caching);
  Generator gen(seed);
  Net net(gen);
  Tensor x = randn({batch, 3, 32, 32}, &gen);
  std::vector<double> labels(batch);
  for (double& l : labels) l = static_cast<double>(gen.next_u64() % 10);
  Tensor y = from_vector(labels, {batch}, DType::i64);

  double loss = 0;
  for (int i = 0; i < warmup; ++i) loss = net.step(x, y, 0.01);
  const long faults0 = minor_faults();
  const size_t allocs0 = cpu_allocator_stats().large_system_allocs;
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now_ms();
    loss = net.step(x, y, 0.01);
    ms.push_back(now_ms() - t0);
  }
  const double faults = static_cast<double>(minor_faults() - faults0) / steps;
  const double allocs =
      static_cast<double>(cpu_allocator_stats().large_system_allocs - allocs0) / steps;
  std::sort(ms.begin(), ms.end());
  return {caching ? "on" : "off", ms[ms.size() / 2], ms.front(), faults, allocs, loss};
}

// Cost of a minor fault here: malloc + memset + free of 64 MiB, which glibc serves with
// mmap and returns with munmap, so every 4 KiB page is faulted in (and zeroed) each time.
nlohmann::json probe() {
  constexpr size_t kBytes = size_t{64} << 20;
  constexpr int kReps = 20;
  const long f0 = minor_faults();
  const double t0 = now_ms();
  for (int i = 0; i < kReps; ++i) {
    void* volatile p = std::malloc(kBytes);
    std::memset(p, 1, kBytes);
    std::free(p);
  }
  const double ms = (now_ms() - t0) / kReps;
  const double faults = static_cast<double>(minor_faults() - f0) / kReps;
  return {{"ms_per_64MiB", ms}, {"faults_per_64MiB", faults}, {"us_per_fault", 1e3 * ms / faults}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Per-step wall time and page faults of a VGG-11-like CIFAR-10 training step"};
  int64_t batch = 256;
  int steps = 10, warmup = 3, threads = 2;
  uint64_t seed = 0;
  enum class Cache { on, off, both } cache = Cache::both;
  bool json = false, with_probe = false;
  app.add_option("--batch", batch, "images per step")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the weights and the data")->capture_default_str();
  ringflow::apps::add_choice(app, "--cache", cache, {{"on", Cache::on}, {"off", Cache::off}, {"both", Cache::both}},
                             "caching allocator: on, off, or both (on, then off)");
  app.add_flag("--probe", with_probe, "also measure the cost of one minor fault (64 MiB malloc+memset+free)");
  app.add_flag("--json", json, "one JSON object per line instead of text");
  CLI11_PARSE(app, argc, argv);

  set_num_threads(threads);
  const char* tuned = std::getenv("MALLOC_MMAP_MAX_");  // named in the output when set
  const std::string malloc_env = tuned ? fmt::format(" MALLOC_MMAP_MAX_={}", tuned) : "";
  const std::vector<bool> configs = cache == Cache::both ? std::vector<bool>{true, false}
                                                         : std::vector<bool>{cache == Cache::on};
  double first_ms = 0;
  for (const bool c : configs) {
    const Result r = run(c, batch, steps, warmup, seed);
    if (first_ms == 0) first_ms = r.median_ms;
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"framework", "ringflow"}, {"cache", r.config},
                                        {"malloc_env", malloc_env}, {"batch", batch},
                                        {"threads", num_threads()}, {"steps", steps},
                                        {"ms_per_step", r.median_ms}, {"min_ms", r.min_ms},
                                        {"faults_per_step", r.faults},
                                        {"large_system_allocs_per_step", r.sys_allocs},
                                        {"loss", r.loss}}.dump());
    } else {
      fmt::print("ringflow cache={:<3}{} batch={} threads={}: {:8.1f} ms/step (min {:.1f}), "
                 "{:8.0f} faults/step, {:5.1f} large sys allocs/step, ratio {:.3f}, loss {:.4f}\n",
                 r.config, malloc_env, batch, num_threads(), r.median_ms, r.min_ms, r.faults,
                 r.sys_allocs, r.median_ms / first_ms, r.loss);
    }
    std::fflush(stdout);
  }
  if (with_probe) {
    const nlohmann::json p = probe();
    if (json) {
      fmt::print("{}\n", nlohmann::json{{"probe", p}}.dump());
    } else {
      fmt::print("probe: 64 MiB malloc+memset+free {:.2f} ms, {:.0f} faults -> {:.3f} us/fault\n",
                 p["ms_per_64MiB"].get<double>(), p["faults_per_64MiB"].get<double>(),
                 p["us_per_fault"].get<double>());
    }
  }
  return 0;
}
