#include "ringflow/apps/step_memory.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/models/registry.h"

namespace ringflow::apps {
namespace {

// The bytes that one forward and backward of `model` on `batch` random images allocates at
// its peak, and holds when forward has ended, on top of what was allocated before (`before`).
struct StepBytes {
  double before = 0, peak = 0, after_forward = 0;
};
StepBytes step_bytes(nn::Module& model, const std::string& name, int64_t batch, DType precision) {
  Generator gen(1);
  Shape shape{batch};
  for (int64_t d : models::model_input_shape(name)) shape.push_back(d);
  const Tensor x = randn(shape, &gen);
  const Tensor y = zeros({batch}, DType::i64);
  model.zero_grad(/*set_to_none=*/true);
  cpu_allocator_reset_peak();
  // What is allocated already (the probe's weights and input, the run's data and model,
  // which MemAvailable has already taken away) is not the step's.
  StepBytes bytes;
  bytes.before = static_cast<double>(cpu_allocator_stats().allocated);
  {
    Tensor loss;
    {
      std::optional<AutocastGuard> amp;
      if (precision != DType::f32) amp.emplace(precision);
      loss = cross_entropy(model(x), y);
    }
    bytes.after_forward = static_cast<double>(cpu_allocator_stats().allocated) - bytes.before;
    loss.backward();
  }
  bytes.peak = static_cast<double>(cpu_allocator_stats().peak_allocated) - bytes.before;
  return bytes;
}

std::optional<double> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return std::stod(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1 << 30)); }

}  // namespace

StepMemory measure_step_memory(const std::string& name, DType precision) {
  Generator gen(0);
  nn::ModulePtr model = models::make_model(name, 0, {.gen = &gen});
  model->train();
  // Each batch after a warm-up step, so that one-off workspaces count in both; what the
  // first step keeps (the convolutions' transformed weights) counts as fixed.
  const StepBytes first = step_bytes(*model, name, 2, precision);
  const StepBytes two = step_bytes(*model, name, 2, precision);
  const StepBytes four = step_bytes(*model, name, 4, precision);
  // At small batches the peak may fall where a kernel's workspace of fixed size (the
  // Winograd convolutions' chunks) outweighs the activations, and then grows by fewer bytes
  // per image than at the activations' own peak: what forward keeps for backward grows by
  // at least that many.
  StepMemory m;
  m.per_image_bytes = std::max({0.0, (four.peak - two.peak) / 2, (four.after_forward - two.after_forward) / 2});
  m.fixed_bytes = std::max(0.0, two.before - first.before) + std::max(0.0, two.peak - 2 * m.per_image_bytes);
  m.parameter_bytes = static_cast<double>(model->num_parameters()) * 4;
  return m;
}

double available_host_memory() {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      available = kib * 1024;
      break;
    }
  }
  const auto max = read_number("/sys/fs/cgroup/memory.max");
  const auto current = read_number("/sys/fs/cgroup/memory.current");
  if (max && current) {
    const double left = std::max(0.0, *max - *current);
    available = available > 0 ? std::min(available, left) : left;
  }
  return available;
}

void check_step_memory(double need, const StepMemory& m, int64_t batch, int ranks_here,
                       double available, const std::string& model, const std::string& flag) {
  if (available <= 0 || need * ranks_here <= available) return;
  throw std::invalid_argument(fmt::format(
      "{}: a training step of {} needs up to about {} per rank ({:.2f} MiB of activations per "
      "image x {}, twice for the allocator's cache, + {} of gradients, optimizer state and "
      "batches in flight){}, more than the {} this host has available; lower it, or "
      "pass --no-memory-check to try anyway",
      flag, model, gib(need), m.per_image_bytes / (1 << 20), batch, gib(need - m.activations(batch)),
      ranks_here > 1 ? fmt::format(", x {} ranks on this host", ranks_here) : "", gib(available)));
}

}  // namespace ringflow::apps
