// The training step's memory estimate (apps/step_memory.h): fitted at batches 2 and 4, it
// predicts the allocator's peak of a real step at a larger batch and covers what its cache
// holds besides; the refusal names the flag and the figures, and lets through what fits.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "ringflow/apps/step_memory.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/models/registry.h"

using namespace ringflow;

namespace {

// The peaks of a real step at `batch` above what was allocated before it: what is allocated,
// and allocated + cached.
CpuAllocatorStats measured_peaks(const std::string& name, int64_t batch) {
  Generator gen(3);
  nn::ModulePtr model = models::make_model(name, 0, {.gen = &gen});
  model->train();
  Shape shape{batch};
  for (int64_t d : models::model_input_shape(name)) shape.push_back(d);
  const Tensor x = randn(shape, &gen);
  const Tensor y = zeros({batch}, DType::i64);
  cpu_allocator_release_cache();
  cpu_allocator_reset_peak();
  const size_t before = cpu_allocator_stats().allocated;
  cross_entropy((*model)(x), y).backward();
  CpuAllocatorStats s = cpu_allocator_stats();
  s.peak_allocated -= before;
  s.peak_resident -= before;
  return s;
}

}  // namespace

TEST_CASE("the fit from batches 2 and 4 predicts a larger step's peak, the cache's share bounded") {
  const struct {
    const char* model;
    int64_t batch;
  } cases[] = {{"small_cnn", 256}, {"vgg11_cifar", 256}, {"resnet18_cifar", 64}};
  for (const auto& c : cases) {
    const apps::StepMemory m = apps::measure_step_memory(c.model, DType::f32);
    const CpuAllocatorStats got = measured_peaks(c.model, c.batch);
    const double allocated = m.fixed_bytes + m.per_image_bytes * static_cast<double>(c.batch);
    INFO(c.model, " batch ", c.batch, ": fit ", allocated, " bytes allocated, estimate ", m.at(c.batch),
         "; the step's peaks: allocated ", got.peak_allocated, ", with the cache ", got.peak_resident,
         " (fixed ", m.fixed_bytes, ", per image ", m.per_image_bytes, ")");
    CHECK(m.per_image_bytes > 0);
    CHECK(m.parameter_bytes > 0);
    // The fit of what is allocated is close (within the 30% below; VGG-11's margin:
    // docs/failures.md) ...
    CHECK(std::abs(allocated - static_cast<double>(got.peak_allocated)) <= 0.3 * static_cast<double>(got.peak_allocated));
    // ... and the estimate covers what the cache holds besides, without doubling it.
    CHECK(m.at(c.batch) >= static_cast<double>(got.peak_resident));
    CHECK(m.at(c.batch) <= 1.6 * static_cast<double>(got.peak_resident));
  }
}

TEST_CASE("a step that does not fit is refused naming the flag and the figures") {
  apps::StepMemory m;
  m.fixed_bytes = 1 << 30;
  m.per_image_bytes = 1 << 20;
  const double need = m.at(4096);  // 1 GiB + 2 x 4 GiB
  CHECK(need == 9.0 * (1 << 30));
  CHECK_NOTHROW(apps::check_step_memory(need, m, 4096, 1, 10.0 * (1 << 30), "vgg11_cifar", "--batch-size 4096"));
  CHECK_NOTHROW(apps::check_step_memory(need, m, 4096, 1, 0, "vgg11_cifar", "--batch-size 4096"));  // unknown
  try {
    apps::check_step_memory(need, m, 4096, 2, 10.0 * (1 << 30), "vgg11_cifar", "--batch-size 4096");
    FAIL("two ranks of 9 GiB fit in 10 GiB");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("--batch-size 4096: a training step of vgg11_cifar needs up to about 9.0 GiB per rank") == 0);
    CHECK(what.find("1.00 MiB of activations per image x 4096, twice for the allocator's cache, + 1.0 GiB of gradients") != std::string::npos);
    CHECK(what.find("x 2 ranks on this host") != std::string::npos);
    CHECK(what.find("10.0 GiB this host has available") != std::string::npos);
    CHECK(what.find("--no-memory-check") != std::string::npos);
  }
}

TEST_CASE("the host's available memory is read") {
  CHECK(apps::available_host_memory() > 0);
}
